{{/* Names, labels and the image reference shared by every template of the trainop chart. */}}

{{/* The chart name, or nameOverride. */}}
{{- define "trainop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fully qualified app name (63 characters at most, the DNS label limit): fullnameOverride,
else the release name, suffixed with the chart name unless the release name already holds it.
*/}}
{{- define "trainop.fullname" -}}
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

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "trainop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod; they never change across upgrades. */}}
{{- define "trainop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "trainop.labels" -}}
helm.sh/chart: {{ include "trainop.chart" . }}
{{ include "trainop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trainop
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "trainop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "trainop.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The operator config ConfigMap's name. */}}
{{- define "trainop.configName" -}}
{{- printf "%s-config" (include "trainop.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The metrics Service's name (also the Prometheus `job` label a ServiceMonitor gives). */}}
{{- define "trainop.metricsName" -}}
{{- printf "%s-metrics" (include "trainop.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The namespace for an optional monitoring object: its own override, else the release's. */}}
{{- define "trainop.monitoringNamespace" -}}
{{- default .root.Release.Namespace .namespace }}
{{- end }}
