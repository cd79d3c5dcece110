{{- define "evalsi-crds.labels" -}}
app.kubernetes.io/name: evalsi-operator
app.kubernetes.io/part-of: evalsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "evalsi-crds.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "evalsi-crds.webhookResources" -}}
apiGroups: ["evals.si"]
apiVersions: ["v1alpha1"]
resources: [evalruns, onlineevalpolicies, tracesources, evaluators, sandboxclasses, checkpointservers]
{{- end }}
