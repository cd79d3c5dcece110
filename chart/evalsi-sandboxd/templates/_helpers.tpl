{{- define "evalsi-sandboxd.labels" -}}
app.kubernetes.io/name: evalsi-operator
app.kubernetes.io/part-of: evalsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* podAnnotations are the annotations of every pod the chart runs (values podAnnotations). */}}
{{- define "evalsi-sandboxd.podAnnotations" -}}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* podSettings are the pod fields every pod the chart runs shares: pull secrets and priority. */}}
{{- define "evalsi-sandboxd.podSettings" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/* scheduling renders a workload's nodeSelector, tolerations and affinity from its values. */}}
{{- define "evalsi-sandboxd.scheduling" -}}
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

{{/* poolImage is the pool image (the platform image), which sandbox pools run. */}}
{{- define "evalsi-sandboxd.poolImage" -}}
{{ .Values.poolImage.repository }}:{{ .Values.poolImage.tag | default .Chart.AppVersion }}{{ with .Values.poolImage.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* image is the operator image, this repository's: the sandbox operator runs from it. */}}
{{- define "evalsi-sandboxd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* apiURL is evalsid's URL: given, and over https, since the pools send it their tokens. */}}
{{- define "evalsi-sandboxd.apiURL" -}}
{{- $url := required "operator.apiURL: give the URL of the platform's evalsid, over https (the sandbox pools send it their tokens)" .Values.operator.apiURL }}
{{- if not (hasPrefix "https://" $url) }}{{ fail (printf "operator.apiURL: %q is not https: the sandbox pools send their tokens to it" $url) }}{{ end }}
{{- $url }}
{{- end }}

{{/* apiCIDRs are the addresses at which this chart's pods (and the sandbox pools' launchers) may
reach the Kubernetes API server, as a JSON list: kubernetesAPI.cidrs, else the endpoints of the
kubernetes Service that the install or upgrade finds (its EndpointSlices in default), else none
([]: any address on its ports), as with helm template, which reads no cluster. */}}
{{- define "evalsi-sandboxd.apiCIDRs" -}}
{{- $cidrs := .Values.kubernetesAPI.cidrs -}}
{{- if not $cidrs -}}
{{- range (lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "").items -}}
{{- if eq (dig "metadata" "labels" "kubernetes.io/service-name" "" .) "kubernetes" -}}
{{- range .endpoints -}}
{{- range .addresses -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson (uniq $cidrs) -}}
{{- end -}}
