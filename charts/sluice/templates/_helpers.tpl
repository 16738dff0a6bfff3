{{/*
sluice.name: the chart name, or nameOverride; at most 63 characters.
*/}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
sluice.fullname: the release name, prefixed with the chart name unless it
already contains it; or fullnameOverride. At most 63 characters, the longest
a DNS label, and so a Service name, may be.
*/}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
sluice.operator.fullname: the name of the operator's Deployment,
ServiceAccount, Service and RBAC objects.
*/}}
{{- define "sluice.operator.fullname" -}}
{{- printf "%s-operator" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
sluice.chart: chart name and version, for the helm.sh/chart label.
*/}}
{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
sluice.labels: the standard labels of every object the chart renders.
*/}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" . }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
sluice.selectorLabels: the labels that select the release's objects.
*/}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
sluice.operator.labels and sluice.operator.selectorLabels: the same, for the
operator's objects.
*/}}
{{- define "sluice.operator.labels" -}}
{{ include "sluice.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "sluice.operator.selectorLabels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
sluice.operator.serviceAccountName: the operator's ServiceAccount.
*/}}
{{- define "sluice.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "sluice.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
sluice.image: repository:tag, with @digest when set. The tag defaults to the
chart's appVersion. Takes (list $image $root).
*/}}
{{- define "sluice.image" -}}
{{- $image := index . 0 }}
{{- $root := index . 1 }}
{{- $ref := printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) }}
{{- if $image.digest }}
{{- $ref = printf "%s@%s" $ref $image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
sluice.leaderElectionNamespace: where the leader election Lease lives.
*/}}
{{- define "sluice.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.operator.leaderElection.namespace }}
{{- end }}

{{/*
sluice.fleetNamespace: the default LimiterFleet's namespace.
*/}}
{{- define "sluice.fleetNamespace" -}}
{{- default .Release.Namespace .Values.fleet.namespace }}
{{- end }}

{{/*
sluice.validate: checks across values that the schema can't state clearly.
*/}}
{{- define "sluice.validate" -}}
{{- if and (gt (int .Values.operator.replicas) 1) (not .Values.operator.leaderElection.enabled) }}
{{- fail "operator.replicas above 1 needs operator.leaderElection.enabled: replicas would reconcile the same objects at once" }}
{{- end }}
{{- if and .Values.fleet.enabled .Values.operator.watchNamespaces (not (has (include "sluice.fleetNamespace" .) .Values.operator.watchNamespaces)) }}
{{- fail (printf "fleet's namespace %q must be one of operator.watchNamespaces %v, or the operator won't see the fleet" (include "sluice.fleetNamespace" .) .Values.operator.watchNamespaces) }}
{{- end }}
{{- end }}

{{/*
The limiter metrics reader: the ClusterRole that may get the limiter pods'
/metrics on their admin port, and the ServiceAccount whose token the
PodMonitor sends.
*/}}
{{- define "sluice.limiterMetricsReader" -}}
{{- printf "%s-limiter-metrics-reader" (include "sluice.fullname" . | trunc 38 | trimSuffix "-") }}
{{- end }}

{{/*
sluice.webhook.serviceName: the Service of the operator's conversion webhook.
*/}}
{{- define "sluice.webhook.serviceName" -}}
{{- printf "%s-webhook" (include "sluice.operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
sluice.webhook.secretName: the Secret of the conversion webhook's certificate.
*/}}
{{- define "sluice.webhook.secretName" -}}
{{- printf "%s-webhook-cert" (include "sluice.operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
