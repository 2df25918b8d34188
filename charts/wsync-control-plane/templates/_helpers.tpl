{{/* The objects' name: wsync-control-plane, or fullnameOverride. */}}
{{- define "wsync-control-plane.name" -}}
{{- default "wsync-control-plane" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The control plane's Pods; the release's too, so that two releases in one namespace keep
apart (the NetworkPolicy lets in the release's own replicas by these). */}}
{{- define "wsync-control-plane.selectorLabels" -}}
app.kubernetes.io/name: wsync-control-plane
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wsync-control-plane.labels" -}}
{{ include "wsync-control-plane.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* A secret's name: <fullname>-<suffix> when the chart makes it from `value`, else its
existingSecret; "" with neither. Called with (list $ .Values.x "suffix"). */}}
{{- define "wsync-control-plane.secretName" -}}
{{- $root := index . 0 -}}
{{- $secret := index . 1 -}}
{{- if $secret.value -}}
{{ include "wsync-control-plane.name" $root }}-{{ index . 2 }}
{{- else -}}
{{ $secret.existingSecret }}
{{- end -}}
{{- end -}}

{{- define "wsync-control-plane.databaseSecret" -}}
{{- $secret := dict "value" .Values.database.url "existingSecret" .Values.database.existingSecret -}}
{{- $name := include "wsync-control-plane.secretName" (list . $secret "database") -}}
{{- required "database.existingSecret or database.url is required (or database.sqlite.enabled)" $name -}}
{{- end -}}

{{/* The SQLite file, on the data volume. */}}
{{- define "wsync-control-plane.sqliteUrl" -}}
sqlite:///var/lib/wsync/wsync-control-plane.db
{{- end -}}

{{/* Whether the replicas forward streams to each other: only two or more have anyone to. */}}
{{- define "wsync-control-plane.forwards" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end -}}
{{- end -}}

{{- define "wsync-control-plane.publicUrl" -}}
{{- if .Values.publicUrl -}}
{{ .Values.publicUrl }}
{{- else if .Values.host -}}
https://{{ .Values.host }}
{{- end -}}
{{- end -}}

{{- define "wsync-control-plane.tlsSecret" -}}
{{- if .Values.ingress.tls.secretName -}}
{{ .Values.ingress.tls.secretName }}
{{- else if .Values.certManager.enabled -}}
{{ include "wsync-control-plane.name" . }}-tls
{{- end -}}
{{- end -}}

{{/* The ingress's names: host, and the workspaces' wildcard. */}}
{{- define "wsync-control-plane.hosts" -}}
{{- $hosts := list -}}
{{- if .Values.host }}{{ $hosts = append $hosts .Values.host }}{{ end -}}
{{- if .Values.workspacesDomain }}{{ $hosts = append $hosts (printf "*.%s" .Values.workspacesDomain) }}{{ end -}}
{{- toJson $hosts -}}
{{- end -}}

{{/* What the chart refuses, with why; included by the Deployment. */}}
{{- define "wsync-control-plane.validate" -}}
{{- $replicas := int .Values.replicas -}}
{{- if .Values.database.sqlite.enabled -}}
{{- if gt $replicas 1 -}}
{{- fail (printf "database.sqlite.enabled with replicas: %d: SQLite is one process's database; set replicas: 1, or use PostgreSQL (database.existingSecret or database.url) for more" $replicas) -}}
{{- end -}}
{{- if .Values.database.url -}}
{{- fail "database.sqlite.enabled and database.url: choose one" -}}
{{- end -}}
{{- else if .Values.database.url -}}
{{- if hasPrefix "sqlite:" .Values.database.url -}}
{{- fail "database.url: a sqlite: URL has no volume here; set database.sqlite.enabled (with replicas: 1) instead" -}}
{{- end -}}
{{- if not (or (hasPrefix "postgres://" .Values.database.url) (hasPrefix "postgresql://" .Values.database.url)) -}}
{{- fail "database.url must be postgres:// or postgresql://" -}}
{{- end -}}
{{- end -}}
{{- if and (include "wsync-control-plane.forwards" .) (not (include "wsync-control-plane.secretName" (list . .Values.forwardSecret "forward"))) -}}
{{- fail "forwardSecret.existingSecret or forwardSecret.value is required with 2 or more replicas: they forward workspace streams to each other" -}}
{{- end -}}
{{- if .Values.oidc.issuer -}}
{{- $_ := required "oidc.clientId is required with oidc.issuer" .Values.oidc.clientId -}}
{{- $_ := required "oidc.clientSecret.existingSecret or oidc.clientSecret.value is required with oidc.issuer" (include "wsync-control-plane.secretName" (list . .Values.oidc.clientSecret "oidc")) -}}
{{- $_ := required "oidc.issuer needs host or publicUrl (the provider sends browsers back there)" (include "wsync-control-plane.publicUrl" .) -}}
{{- end -}}
{{- if .Values.metrics.enabled -}}
{{- $_ := required "metrics.token.existingSecret or metrics.token.value is required with metrics.enabled" (include "wsync-control-plane.secretName" (list . .Values.metrics.token "metrics")) -}}
{{- else if or .Values.metrics.serviceMonitor.enabled .Values.metrics.prometheusRule.enabled -}}
{{- fail "metrics.serviceMonitor and metrics.prometheusRule need metrics.enabled: without its token the control plane serves no metrics" -}}
{{- end -}}
{{- if and .Values.certManager.enabled (not .Values.certManager.issuerRef.name) -}}
{{- fail "certManager.issuerRef.name is required with certManager.enabled" -}}
{{- end -}}
{{- if and .Values.ingress.enabled (not .Values.host) -}}
{{- fail "ingress.enabled needs host" -}}
{{- end -}}
{{- end -}}
