{{- define "gshare.name" -}}gshare{{- end -}}
{{- define "gshare.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- define "gshare.labels" -}}
app.kubernetes.io/name: gshare
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
