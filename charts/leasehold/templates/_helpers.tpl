{{- define "leasehold.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "leasehold.nfsServerImage" -}}
{{ .Values.nfsServer.image.repository }}:{{ .Values.nfsServer.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "leasehold.labels" -}}
app.kubernetes.io/name: leasehold
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "leasehold.managerName" -}}
{{ .Release.Name }}-manager
{{- end -}}

{{- define "leasehold.agentNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- range .Values.agent.namespaces -}}
{{- if not (has . $namespaces) -}}{{- $namespaces = append $namespaces . -}}{{- end -}}
{{- end -}}
{{- join "," $namespaces -}}
{{- end -}}

{{- define "leasehold.restrictedContainer" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
  seccompProfile:
    type: RuntimeDefault
{{- end -}}
