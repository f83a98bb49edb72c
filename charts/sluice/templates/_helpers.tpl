{{/*
Labels every object carries. app.kubernetes.io/name and component are the
ones config/deploy uses (and the Deployments select by); Helm's are added.
*/}}
{{- define "sluice.labels" -}}
app.kubernetes.io/name: sluice
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- with .root.Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The selector of a component's pods: never changes across upgrades. */}}
{{- define "sluice.selector" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image, by digest when one is set. */}}
{{- define "sluice.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The environment the worker and the receiver share: Temporal's connection
(the SDK's own variable names) and the cluster's name.
*/}}
{{- define "sluice.temporalEnv" -}}
{{- if .Values.temporal.apiKeySecret }}
- name: TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .Values.temporal.apiKeySecret }}, key: TEMPORAL_API_KEY}
{{- end }}
{{- if .Values.temporal.tls.enabled }}
- {name: TEMPORAL_TLS, value: "true"}
{{- with .Values.temporal.tls.serverName }}
- {name: TEMPORAL_TLS_SERVER_NAME, value: {{ . | quote }}}
{{- end }}
{{- if .Values.temporal.tls.clientSecret }}
- {name: TEMPORAL_TLS_CLIENT_CERT_PATH, value: /etc/sluice/temporal-client/tls.crt}
- {name: TEMPORAL_TLS_CLIENT_KEY_PATH, value: /etc/sluice/temporal-client/tls.key}
{{- end }}
{{- if .Values.temporal.tls.caSecret }}
- {name: TEMPORAL_TLS_SERVER_CA_CERT_PATH, value: /etc/sluice/temporal-ca/ca.crt}
{{- end }}
{{- end }}
{{- with .Values.cluster }}
- {name: SLUICE_CLUSTER, value: {{ . | quote }}}
{{- end }}
{{- end }}

{{/* The Secrets TLS to Temporal mounts, as volumes and as mounts. */}}
{{- define "sluice.temporalVolumes" -}}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.clientSecret }}
- name: temporal-client
  secret: {secretName: {{ .Values.temporal.tls.clientSecret }}}
{{- end }}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.caSecret }}
- name: temporal-ca
  secret: {secretName: {{ .Values.temporal.tls.caSecret }}}
{{- end }}
{{- end }}
{{- define "sluice.temporalMounts" -}}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.clientSecret }}
- {name: temporal-client, mountPath: /etc/sluice/temporal-client, readOnly: true}
{{- end }}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.caSecret }}
- {name: temporal-ca, mountPath: /etc/sluice/temporal-ca, readOnly: true}
{{- end }}
{{- end }}

{{/* A component's extra environment, sorted by name. */}}
{{- define "sluice.extraEnv" -}}
{{- range $k := keys . | sortAlpha }}
- {name: {{ $k }}, value: {{ index $ $k | quote }}}
{{- end }}
{{- end }}

{{/* Scheduling and the pod's security context, shared by both Deployments. */}}
{{- define "sluice.podSpec" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity: {{ toYaml . | nindent 2 }}
{{- end }}
securityContext:
  runAsNonRoot: true
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* The receiver's own environment: what the receiver and the controller set. */}}
{{- define "sluice.receiverEnv" -}}
- {name: SLUICE_RECEIVER_ADDR, value: ":8081"}
{{- if .Values.admissionWebhooks.enabled }}
- {name: SLUICE_ADMISSION_ADDR, value: ":8443"}
- {name: SLUICE_ADMISSION_HOSTS, value: "sluice-receiver.{{ .Release.Namespace }}.svc"}
- {name: SLUICE_ADMISSION_SECRET, value: "{{ .Release.Namespace }}/sluice-admission-certs"}
{{- end }}
{{- with .Values.receiver.auth.tokensSecret }}
- {name: SLUICE_RECEIVER_TOKENS_FILE, value: /etc/sluice/receiver-tokens/tokens}
{{- end }}
{{- with .Values.receiver.auth.oidc.issuer }}
- {name: SLUICE_RECEIVER_OIDC_ISSUER, value: {{ . | quote }}}
{{- end }}
{{- with .Values.receiver.auth.oidc.audience }}
- {name: SLUICE_RECEIVER_OIDC_AUDIENCE, value: {{ . | quote }}}
{{- end }}
{{- end }}

{{/* The receiver's ports, by the name given for the CloudEvents one. */}}
{{- define "sluice.receiverPorts" -}}
- {name: {{ .name }}, containerPort: 8081}
{{- if .root.Values.admissionWebhooks.enabled }}
- {name: admission, containerPort: 8443}
{{- end }}
{{- end }}

{{/* The Secrets a pod mounts, as mounts and as volumes: Temporal's TLS
and, where the receiver runs, its tokens. */}}
{{- define "sluice.mounts" -}}
{{- include "sluice.temporalMounts" .root }}
{{- if and .receiver .root.Values.receiver.auth.tokensSecret }}
- {name: receiver-tokens, mountPath: /etc/sluice/receiver-tokens, readOnly: true}
{{- end }}
{{- end }}
{{- define "sluice.volumes" -}}
{{- include "sluice.temporalVolumes" .root }}
{{- with and .receiver .root.Values.receiver.auth.tokensSecret }}
- name: receiver-tokens
  secret: {secretName: {{ . }}}
{{- end }}
{{- end }}
