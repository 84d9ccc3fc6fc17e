{{/* Names and labels. */}}
{{- define "smsgw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "smsgw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "smsgw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "smsgw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "smsgw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "smsgw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "smsgw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "smsgw.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "smsgw.secretName" -}}
{{- default (include "smsgw.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{- define "smsgw.claimName" -}}
{{- default (printf "%s-data" (include "smsgw.fullname" .)) .Values.persistence.existingClaim -}}
{{- end -}}

{{/* "true" when config.redis.addr names at least one address. */}}
{{- define "smsgw.redisEnabled" -}}
{{- $addr := "" -}}
{{- with .Values.config.redis -}}{{- $addr = toString (default "" .addr) -}}{{- end -}}
{{- if ne (trim (replace "," "" $addr)) "" -}}true{{- end -}}
{{- end -}}

{{/* The container port: the port of config.listen. */}}
{{- define "smsgw.port" -}}
{{- $listen := toString (default ":8080" .Values.config.listen) -}}
{{- $port := regexFind "[0-9]+$" $listen -}}
{{- if not $port -}}
{{- fail (printf "config.listen %q must end with a port (for example \":8080\")" $listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/*
A Go duration ("20s", "1m30s", "500ms") in seconds, as a float. Fails on
anything else, naming the key. Call with (list "key.path" value).
*/}}
{{- define "smsgw.seconds" -}}
{{- $key := index . 0 -}}
{{- $v := toString (index . 1) -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$" $v) -}}
{{- fail (printf "%s: %q is not a Go duration such as \"20s\" or \"1m30s\"" $key $v) -}}
{{- end -}}
{{- $unit := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" $v -1 -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 -}}
{{- $u := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" -}}
{{- $total = addf $total (mulf $n (get $unit $u)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* dispatch.shutdown_timeout in seconds (smsgw's default 20s when unset). */}}
{{- define "smsgw.shutdownSeconds" -}}
{{- $d := "20s" -}}
{{- with .Values.config.dispatch -}}{{- if .shutdown_timeout -}}{{- $d = .shutdown_timeout -}}{{- end -}}{{- end -}}
{{- include "smsgw.seconds" (list "config.dispatch.shutdown_timeout" $d) -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: at least preStop + shutdown_timeout + 2 s
(messages cut short when smsgw stops hard get 2 s to go back to the queue).
*/}}
{{- define "smsgw.gracePeriod" -}}
{{- $shutdown := include "smsgw.shutdownSeconds" . | float64 -}}
{{- $pre := .Values.preStop.sleepSeconds | default 0 | float64 -}}
{{- $min := addf $pre $shutdown 2.0 -}}
{{- if eq (toString .Values.terminationGracePeriodSeconds) "" -}}
{{- addf $min 8.0 | ceil | int -}}
{{- else -}}
{{- $g := .Values.terminationGracePeriodSeconds | float64 -}}
{{- if le $g $min -}}
{{- fail (printf "terminationGracePeriodSeconds %v must exceed preStop.sleepSeconds %v + dispatch.shutdown_timeout %vs + 2s = %vs, or Kubernetes kills smsgw (SIGKILL) while it is still finishing sends; leave it empty to derive it" $g $pre $shutdown $min) -}}
{{- end -}}
{{- $g | int -}}
{{- end -}}
{{- end -}}

{{/*
The most smsgw pods that can run at once in Redis mode: replicaCount or
autoscaling.maxReplicas, plus the rolling update's maxSurge.
*/}}
{{- define "smsgw.maxPods" -}}
{{- $replicas := int .Values.replicaCount -}}
{{- if .Values.autoscaling.enabled -}}{{- $replicas = int .Values.autoscaling.maxReplicas -}}{{- end -}}
{{- $surge := 0 -}}
{{- $s := toString .Values.rollingUpdate.maxSurge -}}
{{- if hasSuffix "%" $s -}}
{{- $pct := trimSuffix "%" $s | float64 -}}
{{- $surge = divf (mulf $pct (float64 $replicas)) 100.0 | ceil | int -}}
{{- else if ne $s "" -}}
{{- $surge = int $s -}}
{{- end -}}
{{- add $replicas $surge -}}
{{- end -}}

{{/*
Render-time checks: the replica rule, max_senders, secrets kept out of the
ConfigMap. Included by the Deployment; fails the render with the reason.
*/}}
{{- define "smsgw.validate" -}}
{{- $cfg := .Values.config -}}
{{- $redis := include "smsgw.redisEnabled" . -}}
{{- if not $redis -}}
  {{- if gt (int .Values.replicaCount) 1 -}}
    {{- fail (printf "\n\nreplicaCount is %d but config.redis.addr is empty (embedded mode).\nEmbedded mode runs EXACTLY ONE replica: its limiter is in the process and paces at the full limits.target_rps, so %d embedded replicas would send %d x target_rps to the provider.\nEither set replicaCount: 1, or set config.redis.addr (Redis, Redis Cluster or Sentinel) to run several replicas that share one limit and one queue.\n" (int .Values.replicaCount) (int .Values.replicaCount) (int .Values.replicaCount)) -}}
  {{- end -}}
  {{- if .Values.autoscaling.enabled -}}
    {{- fail "\n\nautoscaling.enabled is true but config.redis.addr is empty (embedded mode).\nEmbedded mode runs EXACTLY ONE replica: its limiter is in the process and paces at the full limits.target_rps, so a second embedded replica would double the rate the provider sees.\nSet config.redis.addr to autoscale, or disable autoscaling.\n" -}}
  {{- end -}}
  {{- if not (and $cfg.store $cfg.store.path (hasPrefix "/" (toString $cfg.store.path))) -}}
    {{- fail "config.store.path must be an absolute directory in embedded mode (the chart mounts the data volume there)" -}}
  {{- end -}}
{{- else -}}
  {{- $senders := 23 -}}
  {{- with $cfg.limits -}}{{- if hasKey . "max_senders" -}}{{- $senders = int .max_senders -}}{{- end -}}{{- end -}}
  {{- $pods := int (include "smsgw.maxPods" .) -}}
  {{- if lt $senders $pods -}}
    {{- $target := 90.0 -}}
    {{- with $cfg.limits -}}{{- if hasKey . "target_rps" -}}{{- $target = float64 .target_rps -}}{{- end -}}{{- end -}}
    {{- $what := printf "replicaCount %d" (int .Values.replicaCount) -}}
    {{- if .Values.autoscaling.enabled -}}{{- $what = printf "autoscaling.maxReplicas %d" (int .Values.autoscaling.maxReplicas) -}}{{- end -}}
    {{- fail (printf "\n\nconfig.limits.max_senders is %d but up to %d smsgw pods can run at once (%s + rollingUpdate.maxSurge %v).\nWhile Redis is unreachable each pod paces itself alone at target_rps / max_senders = %v / %d = %.2f msg/s, so %d pods would send up to %.1f msg/s together, above target_rps %v.\nSet config.limits.max_senders to at least %d (the fallback rate per pod gets smaller), or run fewer replicas.\n" $senders $pods $what .Values.rollingUpdate.maxSurge $target $senders (divf $target $senders) $pods (mulf (divf $target $senders) $pods) $target $pods) -}}
  {{- end -}}
{{- end -}}
{{- if $cfg.producers -}}
  {{- fail "config.producers must not be set: producer keys are secrets. Put the list in secrets.producers (rendered into the Secret as SMSGW_PRODUCERS) or in existingSecret." -}}
{{- end -}}
{{- with $cfg.admin -}}
  {{- if or .key .key_sha256 -}}
    {{- fail "config.admin.key / key_sha256 must not be set: use secrets.adminKey or secrets.adminKeySha256 (or existingSecret)." -}}
  {{- end -}}
  {{- if or .previous_key .previous_key_sha256 -}}
    {{- fail "config.admin.previous_key / previous_key_sha256 must not be set: use secrets.adminPreviousKey or secrets.adminPreviousKeySha256 (or existingSecret)." -}}
  {{- end -}}
{{- end -}}
{{- with $cfg.redis -}}
  {{- if .password -}}{{- fail "config.redis.password must not be set: use secrets.redisPassword (or existingSecret)." -}}{{- end -}}
  {{- if .sentinel_password -}}{{- fail "config.redis.sentinel_password must not be set: use secrets.redisSentinelPassword (or existingSecret)." -}}{{- end -}}
{{- end -}}
{{- with $cfg.provider -}}
  {{- if .token -}}{{- fail "config.provider.token must not be set: use secrets.providerToken (or existingSecret)." -}}{{- end -}}
  {{- if .receipt_secret -}}{{- fail "config.provider.receipt_secret must not be set: use secrets.receiptSecret (or existingSecret)." -}}{{- end -}}
  {{- if .previous_receipt_secret -}}{{- fail "config.provider.previous_receipt_secret must not be set: use secrets.previousReceiptSecret (or existingSecret)." -}}{{- end -}}
  {{- with .twilio -}}{{- if or .auth_token .webhook_auth_token -}}{{- fail "config.provider.twilio.auth_token / webhook_auth_token must not be set: use secrets.twilioAuthToken / twilioWebhookAuthToken (or existingSecret)." -}}{{- end -}}{{- end -}}
  {{- with .vonage -}}{{- if or .api_key .api_secret .signature_secret -}}{{- fail "config.provider.vonage.api_key / api_secret / signature_secret must not be set: use secrets.vonageApiKey / vonageApiSecret / vonageSignatureSecret (or existingSecret)." -}}{{- end -}}{{- end -}}
{{- end -}}
{{- range $i, $p := .Values.secrets.producers -}}
  {{- range $k := list "name" "key" "key_sha256" "previous_key" "previous_key_sha256" -}}
    {{- if and (hasKey $p $k) (not (kindIs "string" (get $p $k))) -}}
      {{- fail (printf "secrets.producers[%d].%s must be a string: quote it (YAML reads an all-digit value as a number)" $i $k) -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- range $k := list "adminKey" "adminKeySha256" "adminPreviousKey" "adminPreviousKeySha256" "redisPassword" "redisSentinelPassword" "providerToken" "twilioAuthToken" "vonageApiKey" "vonageApiSecret" "receiptSecret" "previousReceiptSecret" "twilioWebhookAuthToken" "vonageSignatureSecret" -}}
  {{- $v := get $.Values.secrets $k -}}
  {{- if and $v (not (kindIs "string" $v)) -}}
    {{- fail (printf "secrets.%s must be a string: quote it (YAML reads an all-digit value as a number)" $k) -}}
  {{- end -}}
{{- end -}}
{{- if and (not .Values.existingSecret) (not .Values.secrets.producers) -}}
  {{- fail "secrets.producers must list at least one producer (nobody could send otherwise), or set existingSecret to a Secret holding SMSGW_PRODUCERS." -}}
{{- end -}}
{{- if not (has (toString .Values.preStop.method) (list "sleep" "exec")) -}}
  {{- fail (printf "preStop.method %q must be sleep or exec" (toString .Values.preStop.method)) -}}
{{- end -}}
{{- end -}}

{{/*
The port of admin.listen (the operator endpoints' own listener), empty when
it is not set: /metrics, /v1/admin/* and /dashboard/ are then on the main
port.
*/}}
{{- define "smsgw.adminPort" -}}
{{- $admin := default dict .Values.config.admin -}}
{{- $listen := toString (default "" $admin.listen) -}}
{{- if $listen -}}
{{- $port := regexFind "[0-9]+$" $listen -}}
{{- if not $port -}}
{{- fail (printf "config.admin.listen %q must end with a port (for example \":9091\")" $listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}
{{- end -}}
