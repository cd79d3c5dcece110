{{- define "evalsi.labels" -}}
app.kubernetes.io/name: evalsi-operator
app.kubernetes.io/part-of: evalsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "evalsi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{- define "evalsi.apiURL" -}}
{{- if .Values.api.url }}{{ .Values.api.url }}
{{- else if .Values.evalsid.enabled }}{{ ternary "https" "http" .Values.tls.enabled }}://evalsid.{{ .Release.Namespace }}.svc:{{ include "evalsi.evalsidPort" . }}
{{- else }}{{ fail "api.url: with evalsid.enabled=false, give the URL of the platform's evalsid" }}
{{- end }}
{{- end }}

{{- define "evalsi.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "evalsi.restrictedPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* podAnnotations are the annotations of every pod the chart runs (values podAnnotations). */}}
{{- define "evalsi.podAnnotations" -}}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* podSettings are the pod fields every pod the chart runs shares: pull secrets and priority. */}}
{{- define "evalsi.podSettings" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/* scheduling renders a workload's nodeSelector, tolerations and affinity from its values. */}}
{{- define "evalsi.scheduling" -}}
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

{{/* evalsidPort is the in-chart evalsid's port: 8443 with TLS, else 8080. */}}
{{- define "evalsi.evalsidPort" -}}
{{ ternary 8443 8080 .Values.tls.enabled }}
{{- end }}

{{/* apiPeers are the NetworkPolicy peers through which pools reach evalsid (JSON list): the
in-chart evalsid's pods, else api.networkPeers (empty: the operator reads them from api.url). */}}
{{- define "evalsi.apiPeers" -}}
{{- if and (not .Values.api.url) .Values.evalsid.enabled -}}
{{ list (dict "podSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" "evalsi-operator" "app.kubernetes.io/component" "evalsid"))) | toJson }}
{{- else -}}
{{ .Values.api.networkPeers | default list | toJson }}
{{- end }}
{{- end }}
