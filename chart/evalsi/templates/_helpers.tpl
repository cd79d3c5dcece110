{{- /* The operator's Leases: one, or per shard one Lease and one member slot, and the standby's (process.ShardLease, process.MemberLease, process.StandbyLease). */ -}}
{{- define "evalsi.operatorLeases" -}}
{{- $shards := int .Values.operator.shards -}}
{{- if le $shards 1 -}}
[evalsi-operator]
{{- else -}}
{{- $names := list -}}
{{- range $i := until $shards -}}
{{- $names = append $names (printf "evalsi-operator-shard-%d" $i) -}}
{{- $names = append $names (printf "evalsi-operator-member-%d" $i) -}}
{{- end -}}
{{- $names = append $names "evalsi-operator-standby" -}}
[{{ join ", " $names }}]
{{- end -}}
{{- end -}}

{{- define "evalsi.labels" -}}
app.kubernetes.io/name: evalsi-operator
app.kubernetes.io/part-of: evalsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* image is the operator image: the operator, the reference evalsid and the uninstall hook. */}}
{{- define "evalsi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* poolImage is the pool image (the platform image): pools that name none, and the sandbox pool. */}}
{{- define "evalsi.poolImage" -}}
{{ .Values.poolImage.repository }}:{{ .Values.poolImage.tag | default .Chart.AppVersion }}{{ with .Values.poolImage.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* apiURL is the evalsid the operator and pools call: api.url, or the reference evalsid's
Service; one of the two is required. */}}
{{- define "evalsi.apiURL" -}}
{{- if and .Values.api.url .Values.referenceEvalsid.enabled }}{{ fail "api.url and referenceEvalsid.enabled: set one; the reference evalsid would run unused beside the platform's" }}
{{- else if .Values.api.url }}{{ .Values.api.url }}
{{- else if .Values.referenceEvalsid.enabled }}{{ ternary "https" "http" .Values.tls.enabled }}://evalsid.{{ .Release.Namespace }}.svc:{{ include "evalsi.evalsidPort" . }}
{{- else }}{{ fail "api.url: give the URL of the platform's evalsid, which runs the evaluations; or, for a trial with simulated results, set referenceEvalsid.enabled=true" }}
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
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
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
{{- if and (not .Values.api.url) .Values.referenceEvalsid.enabled -}}
{{ list (dict "podSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" "evalsi-operator" "app.kubernetes.io/component" "evalsid"))) | toJson }}
{{- else -}}
{{ .Values.api.networkPeers | default list | toJson }}
{{- end }}
{{- end }}

{{/* apiPort is the port evalsid's pods serve on: the in-chart evalsid's, else api.networkPort,
else api.url's port. */}}
{{- define "evalsi.apiPort" -}}
{{- $u := urlParse (include "evalsi.apiURL" .) }}
{{- if and (not .Values.api.url) .Values.referenceEvalsid.enabled }}{{ include "evalsi.evalsidPort" . }}
{{- else if .Values.api.networkPort }}{{ .Values.api.networkPort }}
{{- else }}{{ (regexFind ":[0-9]+$" $u.host) | trimPrefix ":" | default (ternary "443" "80" (eq $u.scheme "https")) }}
{{- end }}
{{- end }}

{{/* apiEgress is the NetworkPolicy egress rule (YAML) through which a pod reaches evalsid, as the
operator renders it for its pools (render/networkpolicy.go), on evalsi.apiPort alone: to the peers
of evalsi.apiPeers when there are any; else, from api.url, an IP address, or the pods labelled
app.kubernetes.io/name=evalsid of a Service's namespace (<service>.<namespace>.svc) or of this
one (a short name). An evalsid outside the cluster needs api.networkPeers. */}}
{{- define "evalsi.apiEgress" -}}
{{- $peers := include "evalsi.apiPeers" . | fromJsonArray }}
{{- $u := urlParse (include "evalsi.apiURL" .) }}
{{- $host := regexReplaceAll ":[0-9]+$" $u.host "" | trimPrefix "[" | trimSuffix "]" }}
{{- $labels := splitList "." (trimSuffix "." $host) }}
{{- if $peers }}
to:
  {{- toYaml $peers | nindent 2 }}
{{- else if regexMatch "^[0-9.]+$" $host }}
to:
  - ipBlock: {cidr: {{ $host }}/32}
{{- else if contains ":" $host }}
to:
  - ipBlock: {cidr: "{{ $host }}/128"}
{{- else if eq (len $labels) 1 }}
to:
  - podSelector:
      matchLabels:
        app.kubernetes.io/name: evalsid
{{- else if and (ge (len $labels) 3) (eq (index $labels 2) "svc") }}
to:
  - namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {{ index $labels 1 }}
    podSelector:
      matchLabels:
        app.kubernetes.io/name: evalsid
{{- else }}
{{- fail (printf "api.networkPeers: evalsid at %s is outside the cluster; name its addresses as ipBlock CIDRs (the NetworkPolicies open nothing wider, never every public address)" (include "evalsi.apiURL" .)) }}
{{- end }}
ports:
  - {port: {{ include "evalsi.apiPort" . }}, protocol: TCP}
{{- end }}
