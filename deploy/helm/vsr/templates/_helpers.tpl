{{- define "vsr.fullname" -}}{{ printf "%s-vsr" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "vsr.labels" -}}
app.kubernetes.io/name: vsr
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "vsr.redis" -}}{{ or .Values.redis.enabled (gt (int .Values.replicaCount) 1) (and .Values.autoscaling.enabled (gt (int .Values.autoscaling.maxReplicas) 1)) }}{{- end -}}
{{- define "vsr.redisAddress" -}}{{ .Values.redis.external.address | default (printf "%s-redis:6379" (include "vsr.fullname" .)) }}{{- end -}}
{{- define "vsr.k8sSource" -}}{{ eq (dig "global" "router" "config_source" "file" (fromYaml .Values.config)) "kubernetes" }}{{- end -}}
