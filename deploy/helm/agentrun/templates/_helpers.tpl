{{/* The operator's image. */}}
{{- define "agentrun.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* The worker image: worker.image, else the operator's. */}}
{{- define "agentrun.workerImage" -}}
{{ .Values.worker.image | default (include "agentrun.image" .) }}
{{- end }}
