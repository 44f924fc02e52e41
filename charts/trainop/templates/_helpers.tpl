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

{{/* The headless Service training pods send progress reports to (docs/progress.md). */}}
{{- define "trainop.progressName" -}}
{{- printf "%s-progress" (include "trainop.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The namespace for an optional monitoring object: its own override, else the release's. */}}
{{- define "trainop.monitoringNamespace" -}}
{{- default .root.Release.Namespace .namespace }}
{{- end }}

{{/*
The operator container's resources: the fleetSize default (values.yaml documents the measured
figures behind each), with every key of .Values.resources set over it.
*/}}
{{- define "trainop.resources" -}}
{{- $presets := dict
  "small" (dict "requests" (dict "cpu" "100m" "memory" "256Mi") "limits" (dict "cpu" "1" "memory" "1Gi"))
  "1000" (dict "requests" (dict "cpu" "500m" "memory" "512Mi") "limits" (dict "cpu" "2" "memory" "1Gi"))
  "2000" (dict "requests" (dict "cpu" "1" "memory" "1Gi") "limits" (dict "cpu" "2" "memory" "2Gi"))
  "5000" (dict "requests" (dict "cpu" "2" "memory" "3Gi") "limits" (dict "cpu" "4" "memory" "4Gi"))
}}
{{- $size := toString .Values.fleetSize }}
{{- if not (hasKey $presets $size) }}
{{- fail (printf "fleetSize: %q is not one of small, 1000, 2000, 5000" $size) }}
{{- end }}
{{- toYaml (mergeOverwrite (deepCopy (get $presets $size)) (deepCopy (.Values.resources | default dict))) }}
{{- end }}

{{/*
The operator pod's affinity: .Values.affinity, plus (replicas > 1, podAntiAffinity.mode soft
or hard, and no podAntiAffinity of the user's) anti-affinity between the replicas.
*/}}
{{- define "trainop.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- $anti := .Values.podAntiAffinity }}
{{- if and (gt (int .Values.replicas) 1) (ne $anti.mode "none") (not (hasKey $affinity "podAntiAffinity")) }}
{{- $term := dict "labelSelector" (dict "matchLabels" (include "trainop.selectorLabels" . | fromYaml)) "topologyKey" $anti.topologyKey }}
{{- if eq $anti.mode "hard" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- end }}
{{- with $affinity }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* topologySpreadConstraints; an entry without labelSelector selects the operator's pods. */}}
{{- define "trainop.topologySpread" -}}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "trainop.selectorLabels" $ | fromYaml)) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- with $out }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
Fails the render when the leader-election timings cannot work together (the rule of
`trainop run`, trainop.kube.lease.timing_error): duration > renew deadline + 2 retry periods,
renew deadline > 1.2 retry periods.
*/}}
{{- define "trainop.checkLeaderElection" -}}
{{- $le := .Values.operator.leaderElection }}
{{- $duration := float64 $le.leaseDurationSeconds }}
{{- $deadline := float64 $le.renewDeadlineSeconds }}
{{- $retry := float64 $le.retryPeriodSeconds }}
{{- if le $deadline (mulf 1.2 $retry) }}
{{- fail (printf "operator.leaderElection.renewDeadlineSeconds (%v) must be greater than 1.2 x retryPeriodSeconds (%v)" $le.renewDeadlineSeconds $le.retryPeriodSeconds) }}
{{- end }}
{{- if le $duration (addf $deadline (mulf 2 $retry)) }}
{{- fail (printf "operator.leaderElection.leaseDurationSeconds (%v) must be greater than renewDeadlineSeconds + 2 x retryPeriodSeconds (%v): a leader that cannot renew must stop acting before its Lease can be taken over" $le.leaseDurationSeconds (addf $deadline (mulf 2 $retry))) }}
{{- end }}
{{- end }}

{{- define "trainop.progressTLSSecret" -}}
{{- .Values.operator.progress.tls.secretName | default (printf "%s-progress-tls" (include "trainop.fullname" .)) }}
{{- end }}
