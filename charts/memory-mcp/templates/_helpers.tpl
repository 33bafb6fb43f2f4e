{{/*
Names. Kubernetes names are limited to 63 characters; component suffixes are added after
truncation so that every component keeps its suffix.
*/}}
{{- define "memory-mcp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "memory-mcp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "memory-mcp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Component names. */}}
{{- define "memory-mcp.server.name" -}}{{ include "memory-mcp.fullname" . }}-server{{- end }}
{{- define "memory-mcp.operator.name" -}}{{ include "memory-mcp.fullname" . }}-operator{{- end }}
{{/* KubeRay derives longer names (<name>-<suffix>-head-svc), so this one stays short. */}}
{{- define "memory-mcp.embedder.name" -}}
{{- printf "%s-embedder" (include "memory-mcp.fullname" . | trunc 30 | trimSuffix "-") }}
{{- end }}
{{- define "memory-mcp.database.name" -}}{{ include "memory-mcp.fullname" . }}-db{{- end }}
{{- define "memory-mcp.migrate.name" -}}{{ include "memory-mcp.fullname" . }}-migrate{{- end }}
{{- define "memory-mcp.operator.serviceAccountName" -}}
{{- default (include "memory-mcp.operator.name" .) .Values.operator.serviceAccount.name }}
{{- end }}

{{/* Labels. Call with (dict "ctx" $ "component" "server"). */}}
{{- define "memory-mcp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memory-mcp.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "memory-mcp.labels" -}}
helm.sh/chart: {{ include "memory-mcp.chart" .ctx }}
{{ include "memory-mcp.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: memory-mcp
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A component's image. Call with (dict "ctx" $ "image" .Values.server.image). */}}
{{- define "memory-mcp.image" -}}
{{- printf "%s:%s" .image.repository (default (default .ctx.Chart.AppVersion .ctx.Values.image.tag) .image.tag) }}
{{- end }}

{{/*
The Secret and key holding the database DSN: the CloudNativePG application Secret when the chart
runs the database, otherwise the external Secret the operator of the release provides.
*/}}
{{- define "memory-mcp.database.secretName" -}}
{{- if .Values.database.cloudnativepg.enabled }}
{{- printf "%s-app" (include "memory-mcp.database.name" .) }}
{{- else }}
{{- required "database.external.secretName is required unless database.cloudnativepg.enabled" .Values.database.external.secretName }}
{{- end }}
{{- end }}

{{- define "memory-mcp.database.secretKey" -}}
{{- if .Values.database.cloudnativepg.enabled }}uri{{- else }}{{ required "database.external.secretKey is required" .Values.database.external.secretKey }}{{- end }}
{{- end }}

{{/* The Ray Serve HTTP endpoint (KubeRay names the Service <RayService>-serve-svc). */}}
{{- define "memory-mcp.embedder.url" -}}
{{- printf "http://%s-serve-svc.%s.svc:%d" (include "memory-mcp.embedder.name" .) .Release.Namespace (int .Values.embedder.servePort) }}
{{- end }}

{{/* Environment shared by every process that talks to the database. */}}
{{- define "memory-mcp.commonEnv" -}}
- name: MEMORY_MCP_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "memory-mcp.database.secretName" . }}
      key: {{ include "memory-mcp.database.secretKey" . }}
- name: MEMORY_MCP_DATA_DIR
  value: /tmp/memory-mcp
- name: MEMORY_MCP_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: MEMORY_MCP_LOG_FORMAT
  value: json
- name: MEMORY_MCP_EMBEDDING_DIM
  value: {{ .Values.embedding.dim | quote }}
{{- with .Values.embedding.model }}
- name: MEMORY_MCP_EMBEDDING_MODEL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
A container command; with devReload it runs under watchfiles (uvicorn[standard] brings it), which
restarts it when a synced source file under /app changes. Call with (dict "ctx" $ "args" (list ...)).
*/}}
{{- define "memory-mcp.command" -}}
{{- if .ctx.Values.devReload }}
{{- toYaml (list "watchfiles" "--filter" "python" "--target-type" "command" (join " " .args) "/app") }}
{{- else }}
{{- toYaml .args }}
{{- end }}
{{- end }}

{{/* The writable scratch space every container gets: the root filesystem is read-only. */}}
{{- define "memory-mcp.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end }}

{{- define "memory-mcp.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/*
The Secret of OAuth signing keys: the one named in values, else the chart's own.
*/}}
{{- define "memory-mcp.oauth.secretName" -}}
{{- .Values.oauth.signingKeysSecret | default (printf "%s-oauth-signing-keys" (include "memory-mcp.fullname" .)) }}
{{- end }}

{{/*
The OAuth routes the ingress adds to ingress.paths (metadata, the authorization server).
*/}}
{{- define "memory-mcp.oauth.paths" -}}
- /.well-known/oauth-protected-resource
- /.well-known/oauth-authorization-server
- /.well-known/jwks.json
- /authorize
- /token
- /revoke
- /register
{{- end }}
