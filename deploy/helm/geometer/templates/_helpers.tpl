{{/* Labels on every object: kustomize's part-of label, and Helm's own. */}}
{{- define "geometer.labels" -}}
app.kubernetes.io/part-of: geometer
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "geometer.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}

{{/* The agent's nodes: the configured selector, and with the GPU Operator only nodes taken
from its mig-manager. */}}
{{- define "geometer.agentNodeSelector" -}}
{{- $selector := deepCopy .Values.agent.nodeSelector -}}
{{- if .Values.gpuOperator.enabled -}}
{{- $_ := set $selector "nvidia.com/gpu.deploy.mig-manager" "false" -}}
{{- /* GPU feature discovery's label can vanish while it is paused; the Operator's stays. */ -}}
{{- $_ := unset $selector "nvidia.com/mig.capable" -}}
{{- $_ := set $selector "nvidia.com/gpu.present" "true" -}}
{{- end -}}
{{ toYaml $selector }}
{{- end }}

{{/* The device plugin the agent restarts: the GPU Operator's, unless set. */}}
{{- define "geometer.devicePlugin" -}}
{{- $namespace := .Values.agent.devicePlugin.namespace -}}
{{- $selector := .Values.agent.devicePlugin.selector -}}
{{- if .Values.gpuOperator.enabled -}}
{{- $namespace = default .Values.gpuOperator.namespace $namespace -}}
{{- $selector = default "app=nvidia-device-plugin-daemonset" $selector -}}
{{- end -}}
namespace: {{ $namespace | quote }}
selector: {{ $selector | quote }}
{{- end }}

{{/* Nodes whose GPU clients a driver upgrade paused: the agent (an NVML client) leaves them,
but stays through its own pause (paused-for-mig-change). */}}
{{- define "geometer.clientNotPaused" -}}
- key: nvidia.com/gpu.deploy.client
  operator: NotIn
  values: ["false", paused-for-driver-upgrade, paused-for-mig-change_paused-for-driver-upgrade]
{{- end }}
