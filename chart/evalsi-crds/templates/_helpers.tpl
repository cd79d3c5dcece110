{{- define "evalsi-crds.labels" -}}
app.kubernetes.io/name: evalsi-operator
app.kubernetes.io/part-of: evalsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "evalsi-crds.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{- define "evalsi-crds.webhookResources" -}}
apiGroups: ["evals.si"]
apiVersions: ["v1alpha1"]
resources: [evalruns, onlineevalpolicies, tracesources, evaluators, sandboxclasses, checkpointservers]
{{- end }}

{{/* podAnnotations are the annotations of every pod the chart runs (values podAnnotations). */}}
{{- define "evalsi-crds.podAnnotations" -}}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* podSettings are the pod fields every pod the chart runs shares: pull secrets and priority. */}}
{{- define "evalsi-crds.podSettings" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/* scheduling renders a workload's nodeSelector, tolerations and affinity from its values. */}}
{{- define "evalsi-crds.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* notChartClass is the webhooks' match condition that passes the SandboxClasses this chart
makes (sandboxd.sandboxClasses), which an install creates beside the webhook before it serves.
Only SandboxClasses, which only cluster administrators may write; everything else is admitted by
the webhook as before. */}}
{{- define "evalsi-crds.notChartClass" -}}
- name: not-a-class-of-this-chart
  expression: "request.resource.resource != 'sandboxclasses' || !has(object.metadata.labels) || !('evals.si/chart-class' in object.metadata.labels)"
{{- end }}
