{{/*
Names are fixed, not derived from the release name: Brewlet is installed once per cluster
(its CRDs, RuntimeClass, webhook and policy are cluster-wide), and the operator finds its
webhook Service, MutatingWebhookConfiguration and certificate Secret by these names.
*/}}
{{- define "brewlet.operatorName" -}}brewlet-operator{{- end -}}
{{- define "brewlet.provisionerName" -}}brewlet-provisioner{{- end -}}
{{- define "brewlet.admissionName" -}}brewlet-pod-admission{{- end -}}
{{- define "brewlet.policyName" -}}brewlet-provisioner-node-scope{{- end -}}

{{- define "brewlet.labels" -}}
app.kubernetes.io/part-of: brewlet
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "brewlet.operatorSelector" -}}
app.kubernetes.io/name: brewlet-operator
app.kubernetes.io/component: operator
{{- end -}}

{{- define "brewlet.provisionerSelector" -}}
app.kubernetes.io/name: brewlet-provisioner
app.kubernetes.io/component: provisioner
{{- end -}}

{{/*
brewlet.image: registry/repository@digest when a digest is set (the tag is then ignored),
else registry/repository:tag (tag defaults to the chart's appVersion).
*/}}
{{- define "brewlet.image" -}}
{{- $img := .image -}}
{{- $repo := $img.repository -}}
{{- if $img.registry }}{{ $repo = printf "%s/%s" $img.registry $img.repository }}{{ end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The service account the node-scope policy and the RBAC bindings name. */}}
{{- define "brewlet.provisionerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "brewlet.provisionerName" . }}
{{- end -}}

{{/*
A startup taint key the agent may remove (provisioner.startupTaints): never one in a domain
Kubernetes manages (the node lifecycle controller's not-ready taints, the control-plane
taint), except the cluster autoscaler's startup-taint prefix. The agent checks the same.
*/}}
{{- define "brewlet.startupTaint" -}}
{{- if and (regexMatch "^([^/]*\\.)?(kubernetes\\.io|k8s\\.io)/" .) (not (hasPrefix "startup-taint.cluster-autoscaler.kubernetes.io/" .)) -}}
{{- fail (printf "provisioner.startupTaints: %q is in a domain Kubernetes manages; the agent may remove only startup taints such as brewlet.sh/runtime-not-ready, startup-taint.cluster-autoscaler.kubernetes.io/<name> or a key of your own domain" .) -}}
{{- end -}}
{{- end -}}

{{/*
brewlet.proxyEnv: the proxy values as the environment Go's HTTP clients read. The API
server is kept out of the proxy by the components themselves (their Kubernetes clients
never use it); NO_PROXY still names the cluster's own names for anything else in-cluster.
*/}}
{{- define "brewlet.proxyEnv" -}}
{{- with .Values.proxy }}
{{- if or .httpsProxy .httpProxy }}
{{- $no := concat (list "127.0.0.1" "localhost" ".svc" ".cluster.local") .noProxy }}
{{- with $.Values.apiServer.host }}{{ $no = append $no . }}{{ end }}
{{- with .httpsProxy }}
- name: HTTPS_PROXY
  value: {{ . | quote }}
{{- end }}
{{- with .httpProxy }}
- name: HTTP_PROXY
  value: {{ . | quote }}
{{- end }}
- name: NO_PROXY
  value: {{ join "," $no | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
brewlet.registryCA: the volume of registry.caBundle (a ConfigMap or a Secret), its key
mounted as ca.crt.
*/}}
{{- define "brewlet.registryCAVolume" -}}
{{- with .Values.registry.caBundle }}
{{- if .configMap }}
- name: registry-ca
  configMap:
    name: {{ .configMap }}
    items:
    - key: {{ .key }}
      path: ca.crt
{{- else if .secret }}
- name: registry-ca
  secret:
    secretName: {{ .secret }}
    items:
    - key: {{ .key }}
      path: ca.crt
{{- end }}
{{- end }}
{{- end -}}

{{/* Brewlet's finalizers, as internal/vocab spells them (chartOperatorAttacks adds them by those names). */}}
{{- define "brewlet.finalizerRevocation" -}}node.brewlet.sh/revocation{{- end -}}
{{- define "brewlet.finalizerCleanup" -}}node.brewlet.sh/cleanup{{- end -}}

{{/* brewlet.signatureKeysName: the ConfigMap of verification.publicKeys. */}}
{{- define "brewlet.signatureKeysName" -}}brewlet-signature-keys{{- end -}}

{{/*
brewlet.signatureKeysVolume: verification.publicKeys and .trustedRoot as a volume of keys.pem
and trusted_root.json (nothing when neither is set).
*/}}
{{- define "brewlet.signatureKeysVolume" -}}
{{- if or .Values.verification.publicKeys .Values.verification.trustedRoot }}
- name: signature-keys
  configMap:
    name: {{ include "brewlet.signatureKeysName" . }}
{{- end }}
{{- end -}}
