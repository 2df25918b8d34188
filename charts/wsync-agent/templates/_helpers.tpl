{{/* The objects' name: wsync-agent, as manifests/ names them, or fullnameOverride. Two
releases in two namespaces may share it; only their cluster-scoped objects may not. */}}
{{- define "wsync-agent.name" -}}
{{- default "wsync-agent" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name of the release's cluster-scoped objects (ClusterRole and its binding), which
two releases in two namespaces must not share: the namespaced name, with the namespace
appended outside manifests/' wsync-system, whole (an RBAC name may have 253 characters). */}}
{{- define "wsync-agent.clusterName" -}}
{{- if eq .Release.Namespace "wsync-system" -}}
{{- include "wsync-agent.name" . -}}
{{- else -}}
{{- printf "%s-%s" (include "wsync-agent.name" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "wsync-agent.selectorLabels" -}}
app.kubernetes.io/name: wsync-agent
{{- end -}}

{{- define "wsync-agent.labels" -}}
{{ include "wsync-agent.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "wsync-agent.tokenSecret" -}}
{{- if .Values.token.value -}}{{ include "wsync-agent.name" . }}-token{{- else -}}{{ required "token.existingSecret or token.value is required" .Values.token.existingSecret }}{{- end -}}
{{- end -}}

{{/* The rights on workspaces' objects, as manifests/base/rbac.yaml grants them, or, in one
shared namespace, as manifests/overlays/shared-namespace/workspaces.yaml does. */}}
{{- define "wsync-agent.workspaceRules" -}}
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- if .namespaces }}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  {{- if .namespaces }}
  resources: ["services", "persistentvolumeclaims", "serviceaccounts", "resourcequotas", "limitranges"]
  {{- else }}
  {{- /* A shared namespace takes no workspace's quota or limit range. */}}
  resources: ["services", "persistentvolumeclaims", "serviceaccounts"]
  {{- end }}
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "patch", "delete"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end -}}
