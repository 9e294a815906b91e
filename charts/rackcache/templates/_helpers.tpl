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
{{- printf "%s/%s:%s" $root.Values.image.registry (index . 1) (default $root.Chart.AppVersion $root.Values.image.tag) -}}
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
