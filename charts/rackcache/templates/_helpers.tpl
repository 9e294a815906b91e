{{/* Labels every object of the chart carries. */}}
{{- define "rackcache.labels" -}}
app.kubernetes.io/part-of: rackcache
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* An image of rackcache's own: registry/name:tag. */}}
{{- define "rackcache.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $ref := printf "%s/%s:%s" $root.Values.image.registry $name (default $root.Chart.AppVersion $root.Values.image.tag) -}}
{{- with index (default dict $root.Values.image.digests) $name -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end }}

{{/*
A manifest shared with config/ (files/, copied by hack/chart-sync.sh):
config/ installs into rackcache-system, the chart into the release's
namespace.
*/}}
{{- define "rackcache.shared" -}}
{{- $root := index . 0 -}}
{{- $root.Files.Get (index . 1) | replace "namespace: rackcache-system" (printf "namespace: %s" $root.Release.Namespace) -}}
{{- end }}

{{/*
Env entries pointing a container's Kubernetes client at kubernetesAPI
(clusters without a service proxy); nothing when kubernetesAPI.host is
empty. Container env wins over what the kubelet injects.
*/}}
{{- define "rackcache.apiEnv" -}}
{{- with .Values.kubernetesAPI.host -}}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $.Values.kubernetesAPI.port | quote }}
{{- end }}
{{- end }}

{{/* hostNetwork and the DNS policy that goes with it, for a pod spec. */}}
{{- define "rackcache.hostNetwork" -}}
{{- if . -}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end }}
