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

{{/* kinds are the evals.si kinds (files/kinds.yaml, written from evalsi.Kinds), as JSON. */}}
{{- define "evalsi-crds.kinds" -}}
{{- (.Files.Get "files/kinds.yaml" | fromYaml).kinds | toJson }}
{{- end }}

{{/* resources are the resources of every evals.si kind, comma-separated; teamResources those of
the namespaced kinds, which teams write (SandboxClasses are the platform team's). */}}
{{- define "evalsi-crds.resources" -}}
{{- $out := list }}
{{- range include "evalsi-crds.kinds" . | fromJsonArray }}{{ $out = append $out .resource }}{{ end }}
{{- join ", " $out }}
{{- end }}
{{- define "evalsi-crds.teamResources" -}}
{{- $out := list }}
{{- range include "evalsi-crds.kinds" . | fromJsonArray }}{{ if .namespaced }}{{ $out = append $out .resource }}{{ end }}{{ end }}
{{- join ", " $out }}
{{- end }}

{{- define "evalsi-crds.webhookResources" -}}
apiGroups: ["evals.si"]
apiVersions: ["v1alpha1"]
resources: [{{ include "evalsi-crds.resources" . }}]
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

{{/* apiCIDRs are the addresses at which this chart's pods (and the sandbox pools' launchers) may
reach the Kubernetes API server, as a JSON list: kubernetesAPI.cidrs, else the endpoints of the
kubernetes Service that the install or upgrade finds (its EndpointSlices in default), else none
([]: any address on its ports), as with helm template, which reads no cluster. */}}
{{- define "evalsi-crds.apiCIDRs" -}}
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
