// Command credplugin is a kubelet credential provider plugin for tests: it speaks the exec
// API (credentialprovider.kubelet.k8s.io/v1) and answers with the user and the password it
// reads, at each run, from the files its environment names, so a test can rotate them.
//
//	CREDPLUGIN_REGISTRY  the auth key answered (host[:port][/path])
//	CREDPLUGIN_USER      the user name
//	CREDPLUGIN_PASSWORD  a file holding the current password
//	CREDPLUGIN_CACHE     the answer's cacheDuration (a Go duration; empty: none)
//	CREDPLUGIN_LOG       a file each run appends the requested image to
//	CREDPLUGIN_FAIL      when set, exit 1 with this message on stderr
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func main() {
	if msg := os.Getenv("CREDPLUGIN_FAIL"); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
	var req struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Image      string `json:"image"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil || req.APIVersion != "credentialprovider.kubelet.k8s.io/v1" || req.Kind != "CredentialProviderRequest" || req.Image == "" {
		fmt.Fprintf(os.Stderr, "bad request %+v: %v\n", req, err)
		os.Exit(1)
	}
	if log := os.Getenv("CREDPLUGIN_LOG"); log != "" {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, _ = fmt.Fprintln(f, req.Image)
			_ = f.Close()
		}
	}
	pw, err := os.ReadFile(os.Getenv("CREDPLUGIN_PASSWORD"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	resp := map[string]any{
		"apiVersion":   "credentialprovider.kubelet.k8s.io/v1",
		"kind":         "CredentialProviderResponse",
		"cacheKeyType": "Registry",
		"auth": map[string]any{os.Getenv("CREDPLUGIN_REGISTRY"): map[string]string{
			"username": os.Getenv("CREDPLUGIN_USER"), "password": strings.TrimSpace(string(pw))}},
	}
	if c := os.Getenv("CREDPLUGIN_CACHE"); c != "" {
		resp["cacheDuration"] = c
	}
	_ = json.NewEncoder(os.Stdout).Encode(resp)
}
