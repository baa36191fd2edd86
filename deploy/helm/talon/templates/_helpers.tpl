{{/* The chart's names and labels. */}}
{{- define "talon.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "talon.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one part: include with (dict "root" $ "part" "worker"). */}}
{{- define "talon.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .part }}
{{- end -}}

{{- define "talon.clusterSecretName" -}}
{{- if .Values.clusterSecret.existingSecret -}}
{{- .Values.clusterSecret.existingSecret -}}
{{- else -}}
{{- printf "%s-cluster" (include "talon.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "talon.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.create -}}
{{- include "talon.fullname" . -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{- define "talon.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "talon.coordinatorUrl" -}}
http://{{ include "talon.fullname" . }}-coordinator:{{ .Values.coordinator.port }}
{{- end -}}

{{/* The cluster secret, mounted read-only at /etc/talon/cluster. */}}
{{- define "talon.clusterSecretVolume" -}}
- name: cluster-secret
  secret:
    secretName: {{ include "talon.clusterSecretName" . }}
    defaultMode: 0400
{{- end -}}

{{- define "talon.clusterSecretMount" -}}
- name: cluster-secret
  mountPath: /etc/talon/cluster
  readOnly: true
{{- end -}}

{{/* The origin's settings and credentials as environment. */}}
{{- define "talon.originEnv" -}}
- name: AWS_REGION
  value: {{ .Values.origin.s3Region | quote }}
{{- end -}}

{{/* Liveness on /healthz, readiness on /readyz, of the admin port named "admin". */}}
{{- define "talon.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: admin}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  periodSeconds: 5
  failureThreshold: 2
{{- end -}}
