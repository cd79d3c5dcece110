{{- define "evalsi-sandboxd.labels" -}}
app.kubernetes.io/name: evalsi-operator
app.kubernetes.io/part-of: evalsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
