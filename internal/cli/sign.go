package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
)

func newRuntimeKeygenCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "keygen",
		Short: "Make an ECDSA P-256 signing key for runtime images",
		Long: `Writes an unencrypted PKCS#8 private key to --out (mode 0600, never overwritten) and its
public key to --out with .pub appended. The public key is what a RuntimeImage's
spec.verification.publicKeys or the chart's verification.publicKeys names. Keep the private
key where your build system signs (a secret store, a KMS with cosign for production).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := signature.GenerateKey()
			if err != nil {
				return err
			}
			priv, err := s.PrivatePEM()
			if err != nil {
				return err
			}
			pub, err := s.PublicPEM()
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			if _, err := f.Write(priv); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.WriteFile(out+".pub", pub, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %s: private %s, public %s.pub\n", s.KeyID(), out, out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "brewlet-signing.key", "private key file to create")
	return c
}

func newRuntimeSignCmd() *cobra.Command {
	var key string
	var insecure bool
	c := &cobra.Command{
		Use:   "sign REF@sha256:DIGEST",
		Short: "Sign a runtime image digest and attach the signature to it in its registry",
		Long: `Signs the digest with --key and pushes a Sigstore bundle as an OCI referrer of it
(artifact type application/vnd.dev.sigstore.bundle.v0.3+json; registries without the
referrers API get the sha256-<hex> referrers tag), the form cosign sign --new-bundle-format
writes. brewlet-operator and every node agent then find and check it where a RuntimeImage
requires a signature.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return usageError{errors.New("--key is required (make one with brewlet runtime keygen)")}
			}
			ref, err := registry.Digest(args[0], insecure)
			if err != nil {
				return usageError{err}
			}
			s, err := signature.LoadSigner(key)
			if err != nil {
				return err
			}
			b, err := s.Bundle(ref.DigestStr())
			if err != nil {
				return err
			}
			opts, err := registryOptions(cmd, insecure)
			if err != nil {
				return err
			}
			m, err := signature.Attach(cmd.Context(), ref, b, opts...)
			if err != nil {
				return registry.CLIHints.Classify(err, ref.RegistryStr(), "")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s with key %s (signature %s)\n", ref.DigestStr(), s.KeyID(), strings.TrimSpace(m))
			return nil
		},
	}
	c.Flags().StringVar(&key, "key", "", "PEM private key, ECDSA P-256 (brewlet runtime keygen)")
	c.Flags().BoolVar(&insecure, "insecure", false, "allow plain HTTP to a non-loopback registry")
	return c
}
