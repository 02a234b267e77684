{{/*
Names
*/}}

{{/* Chart name, e.g. "hero" (nameOverride replaces it). */}}
{{- define "hero.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified release name, truncated to 63 characters (DNS label limit). It is
the release name when that already contains the chart name.
*/}}
{{- define "hero.fullname" -}}
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

{{/*
Name of an object that belongs to one part of the release:
include "hero.partName" (list $ "scheduler") → "<fullname>-scheduler".
The release part is cut to 40 characters so that the suffix always survives and
StatefulSet pod names / controller-revision hashes stay below 63 characters.
*/}}
{{- define "hero.partName" -}}
{{- $root := index . 0 }}
{{- $part := index . 1 }}
{{- printf "%s-%s" (include "hero.fullname" $root | trunc 40 | trimSuffix "-") $part | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "chart-version" for the helm.sh/chart label. */}}
{{- define "hero.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels
*/}}

{{/*
Labels of every object: include "hero.labels" (list $ "scheduler").
The component may be "" for objects shared by the whole release.
*/}}
{{- define "hero.labels" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 -}}
helm.sh/chart: {{ include "hero.chart" $root }}
{{ include "hero.selectorLabels" (list $root $component) }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: {{ include "hero.name" $root }}
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels (immutable once a Deployment exists: never add to these):
include "hero.selectorLabels" (list $ "scheduler").
*/}}
{{- define "hero.selectorLabels" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 -}}
app.kubernetes.io/name: {{ include "hero.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
{{- if $component }}
app.kubernetes.io/component: {{ $component }}
{{- end }}
{{- end }}

{{/*
Components
*/}}

{{/*
The five services as JSON: [{"key": <values key>, "name": <component name>,
"kind": <workload kind>}]. Everything that loops over the services uses this
list, in this order. The router and the runner are StatefulSets: each process
takes its id (ROUTER_ID, WORKER_ID) from its pod's name, which a StatefulSet
keeps for a replica across restarts and replacements and never gives two live
pods at once (see workloads.yaml).
*/}}
{{- define "hero.components" -}}
{{- list
    (dict "key" "supervisorDaemon" "name" "supervisor-daemon" "kind" "Deployment")
    (dict "key" "scheduler" "name" "scheduler" "kind" "Deployment")
    (dict "key" "router" "name" "router" "kind" "StatefulSet")
    (dict "key" "runner" "name" "runner" "kind" "StatefulSet")
    (dict "key" "myceliumGateway" "name" "mycelium-gateway" "kind" "Deployment")
  | toJson }}
{{- end }}

{{/*
Deep merge of two maps as JSON: include "hero.merge" (dict "base" $a "over" $b).
A key present in "over" wins even when its value is false, 0 or "" (sprig's
mergeOverwrite would skip those); maps are merged key by key; lists are replaced.
*/}}
{{- define "hero.merge" -}}
{{- $out := dict }}
{{- range $k, $v := .base }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- range $k, $v := .over }}
{{- $cur := get $out $k }}
{{- if and (kindIs "map" $v) (kindIs "map" $cur) }}
{{- $_ := set $out $k (include "hero.merge" (dict "base" $cur "over" $v) | fromJson) }}
{{- else if not (kindIs "invalid" $v) }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
Effective settings of one service as JSON: `defaults` deep-merged with the
service's own block; the list keys extraEnv, envFrom, extraArgs, extraVolumes,
extraVolumeMounts, initContainers and extraContainers are concatenated
(defaults first) instead of replaced.
include "hero.componentValues" (list $ "runner")
*/}}
{{- define "hero.componentValues" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $defaults := $root.Values.defaults }}
{{- $own := index $root.Values $key }}
{{- $c := include "hero.merge" (dict "base" $defaults "over" $own) | fromJson }}
{{- range $k := list "extraEnv" "envFrom" "extraArgs" "extraVolumes" "extraVolumeMounts" "initContainers" "extraContainers" }}
{{- $_ := set $c $k (concat (get $defaults $k | default list) (get $own $k | default list)) }}
{{- end }}
{{- toJson $c }}
{{- end }}

{{/*
Images
*/}}

{{/*
Image reference from {registry, repository, tag, digest}; the tag defaults to the
chart's appVersion, a digest wins over the tag.
include "hero.image" (dict "image" $img "default" $.Chart.AppVersion)
*/}}
{{- define "hero.image" -}}
{{- $img := .image }}
{{- $repo := $img.repository }}
{{- if $img.registry }}
{{- $repo = printf "%s/%s" (trimSuffix "/" $img.registry) $repo }}
{{- end }}
{{- if $img.digest }}
{{- printf "%s@%s" $repo $img.digest }}
{{- else }}
{{- printf "%s:%s" $repo (toString (default .default $img.tag)) }}
{{- end }}
{{- end }}

{{/*
Service account
*/}}

{{- define "hero.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hero.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Secrets and Redis
*/}}

{{/* Name of the Secret holding the admin secret, and its key. */}}
{{- define "hero.adminSecretName" -}}
{{- default (include "hero.partName" (list . "admin")) .Values.adminSecret.existingSecret }}
{{- end }}

{{- define "hero.adminSecretKey" -}}
{{- if .Values.adminSecret.existingSecret }}
{{- .Values.adminSecret.existingSecretKey }}
{{- else -}}
admin-secret
{{- end }}
{{- end }}

{{/*
"external" or "bundled": where Redis comes from; fails on a contradiction or when
neither is configured.
*/}}
{{- define "hero.redisMode" -}}
{{- $ext := .Values.redis.external }}
{{- $external := or $ext.url $ext.existingSecret }}
{{- if and $ext.url $ext.existingSecret }}
{{- fail "redis.external.url and redis.external.existingSecret are both set: set only one" }}
{{- end }}
{{- if and $external .Values.redis.bundled.enabled }}
{{- fail "redis.external.* is set and redis.bundled.enabled is true: choose one (set redis.bundled.enabled=false to use the external Redis)" }}
{{- end }}
{{- if $ext.aclUsers }}
{{- $u := urlParse ($ext.url | default "") }}
{{- if or (not $ext.url) (not (has $u.scheme (list "redis" "rediss"))) $u.userinfo }}
{{- fail "redis.external.aclUsers needs redis.external.url as redis:// or rediss://host:port/db without a user or password (each service connects as its own user)" }}
{{- end }}
{{- end }}
{{- if $external -}}
external
{{- else if .Values.redis.bundled.enabled -}}
bundled
{{- else }}
{{- fail "no Redis configured: set redis.external.url, redis.external.existingSecret, or redis.bundled.enabled=true" }}
{{- end }}
{{- end }}

{{/* Name of the bundled Redis StatefulSet and its client Service. */}}
{{- define "hero.redisName" -}}
{{- include "hero.partName" (list . "redis") }}
{{- end }}

{{/* Name of the Secret the services read REDIS_URL from, and its key. */}}
{{- define "hero.redisSecretName" -}}
{{- if .Values.redis.external.existingSecret }}
{{- .Values.redis.external.existingSecret }}
{{- else }}
{{- include "hero.partName" (list . "redis") }}
{{- end }}
{{- end }}

{{- define "hero.redisSecretKey" -}}
{{- if .Values.redis.external.existingSecret }}
{{- .Values.redis.external.existingSecretKey }}
{{- else -}}
redis-url
{{- end }}
{{- end }}

{{/*
A secret value that is generated once and then kept across upgrades: the value
given, else the one already stored in the Secret (lookup), else a new random one.
`helm template` and --dry-run cannot look up, so they show a fresh random value.
include "hero.persistentSecret" (dict "root" $ "name" <secret> "key" <key> "value" <given> "length" 32)
*/}}
{{- define "hero.persistentSecret" -}}
{{- if .value }}
{{- .value }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name }}
{{- $data := dig "data" dict ($existing | default dict) }}
{{- if hasKey $data .key }}
{{- index $data .key | b64dec }}
{{- else }}
{{- randAlphaNum (int .length) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
host:port of a service for its peers: the in-cluster Service unless an address is
given. include "hero.peerAddr" (list $ "scheduler" <given addr>)
*/}}
{{- define "hero.peerAddr" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $given := index . 2 }}
{{- if $given }}
{{- $given }}
{{- else }}
{{- $peer := include "hero.componentValues" (list $root $key) | fromJson }}
{{- if not $peer.enabled }}
{{- fail (printf "%s is disabled: give the address of the one in use (see the *Addr values of the services that call it)" $key) }}
{{- end }}
{{- $name := $key | kebabcase }}
{{- printf "%s:%d" (include "hero.partName" (list $root $name)) (int $peer.ports.grpc) }}
{{- end }}
{{- end }}

{{/*
The scheduler as its callers (router, supervisor-daemon) dial it: every ready pod
of the release's scheduler through its headless Service
(dns:///<fullname>-scheduler-headless.<namespace>.svc.<clusterDomain>:<grpc>), round
robin over those whose gRPC health is SERVING; or the address given.
include "hero.schedulerTarget" (list $ <given addr>)
*/}}
{{- define "hero.schedulerTarget" -}}
{{- $root := index . 0 }}
{{- $given := index . 1 }}
{{- if $given }}
{{- $given }}
{{- else }}
{{- $peer := include "hero.componentValues" (list $root "scheduler") | fromJson }}
{{- if not $peer.enabled }}
{{- fail "scheduler is disabled: give the address of the one in use (supervisorDaemon.schedulerAddr, router.schedulerAddr)" }}
{{- end }}
{{- printf "dns:///%s.%s.svc.%s:%d" (include "hero.partName" (list $root "scheduler-headless")) $root.Release.Namespace $root.Values.clusterDomain (int $peer.ports.grpc) }}
{{- end }}
{{- end }}

{{/*
Probes
*/}}

{{/* include "hero.httpProbe" (dict "probe" $settings "path" "/healthz") */}}
{{- define "hero.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: admin
  scheme: HTTP
initialDelaySeconds: {{ int .probe.initialDelaySeconds }}
periodSeconds: {{ int .probe.periodSeconds }}
timeoutSeconds: {{ int .probe.timeoutSeconds }}
failureThreshold: {{ int .probe.failureThreshold }}
successThreshold: {{ int (.probe.successThreshold | default 1) }}
{{- end }}

{{/*
TLS and Redis users
*/}}

{{/*
Prefix of the Secrets of certificates and Redis users (the hook Job's --prefix):
the part of every object name before "-<part>" (see hero.partName).
*/}}
{{- define "hero.pkiPrefix" -}}
{{- include "hero.fullname" . | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/* "true" when cert-manager issues the certificates. */}}
{{- define "hero.certManager" -}}
{{- if and .Values.tls.enabled .Values.tls.certManager.enabled }}true{{ end }}
{{- end }}

{{/* "true" when the services connect to Redis as their own ACL users. */}}
{{- define "hero.redisUsers" -}}
{{- $mode := include "hero.redisMode" . }}
{{- if or (and (eq $mode "bundled") .Values.redis.bundled.auth.enabled) (and (eq $mode "external") .Values.redis.external.aclUsers) }}true{{ end }}
{{- end }}

{{/* "true" when the bundled Redis serves TLS only (with client certificates). */}}
{{- define "hero.redisTLS" -}}
{{- if and (eq (include "hero.redisMode" .) "bundled") .Values.tls.enabled .Values.redis.bundled.tls.enabled }}true{{ end }}
{{- end }}

{{/* "true" when the hook Job has something to make: certificates, Redis users, or the
operator secrets' HMAC key (for the supervisor-daemon). */}}
{{- define "hero.pkiJob" -}}
{{- if or (and .Values.tls.enabled (not .Values.tls.certManager.enabled)) (include "hero.redisUsers" .) .Values.supervisorDaemon.enabled }}true{{ end }}
{{- end }}

{{/* Name of a certificate's Secret: include "hero.tlsSecretName" (list $ "scheduler"). */}}
{{- define "hero.tlsSecretName" -}}
{{- include "hero.partName" (list (index . 0) (printf "%s-tls" (index . 1))) }}
{{- end }}

{{/* Name of the Secret of the operator secrets' HMAC key (key operator-secret-key):
made by the hook Job, mounted by the supervisor-daemon alone. */}}
{{- define "hero.operatorKeySecretName" -}}
{{- include "hero.partName" (list . "operator-key") }}
{{- end }}

{{/* Name of the Redis users' Secret (ACL file and one password per user). */}}
{{- define "hero.redisUsersSecretName" -}}
{{- include "hero.partName" (list . "redis-users") }}
{{- end }}

{{/*
The names of a Service as clients in the cluster reach it: name, name.ns,
name.ns.svc, name.ns.svc.<clusterDomain>. include "hero.serviceDNSNames" (list $ <name>) → JSON list.
*/}}
{{- define "hero.serviceDNSNames" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $ns := $root.Release.Namespace }}
{{- list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.%s" $name $ns $root.Values.clusterDomain) | toJson }}
{{- end }}

{{/* Names of the public API's certificate as a JSON list (besides localhost). */}}
{{- define "hero.apiHosts" -}}
{{- $hosts := include "hero.serviceDNSNames" (list . (include "hero.partName" (list . "supervisor-daemon"))) | fromJsonArray }}
{{- if .Values.supervisorDaemon.publicService.enabled }}
{{- $hosts = concat $hosts (include "hero.serviceDNSNames" (list . (include "hero.partName" (list . "supervisor-daemon-public"))) | fromJsonArray) }}
{{- end }}
{{- concat $hosts .Values.tls.apiHosts | uniq | toJson }}
{{- end }}

{{/* Names of the bundled Redis' certificate as a JSON list (besides localhost). */}}
{{- define "hero.redisHosts" -}}
{{- include "hero.serviceDNSNames" (list . (include "hero.redisName" .)) }}
{{- end }}

{{/*
REDIS_URL of one service when the chart knows Redis' address (bundled Redis, or
redis.external.aclUsers): redis[s]://[<service>@]host:port/db. No password: with ACL
users it is read from REDIS_PASSWORD_FILE. Empty when REDIS_URL comes from a Secret.
include "hero.redisURL" (list $ "scheduler")
*/}}
{{- define "hero.redisURL" -}}
{{- $root := index . 0 }}
{{- $svc := index . 1 }}
{{- $mode := include "hero.redisMode" $root }}
{{- $user := "" }}
{{- if include "hero.redisUsers" $root }}
{{- $user = printf "%s@" $svc }}
{{- end }}
{{- if eq $mode "bundled" }}
{{- printf "%s://%s%s:6379/0" (ternary "rediss" "redis" (eq (include "hero.redisTLS" $root) "true")) $user (include "hero.redisName" $root) }}
{{- else if $root.Values.redis.external.aclUsers }}
{{- $u := urlParse $root.Values.redis.external.url }}
{{- printf "%s://%s%s%s" $u.scheme $user $u.host $u.path }}{{ with $u.query }}?{{ . }}{{ end }}
{{- end }}
{{- end }}

{{/*
The runner's job sandbox
*/}}

{{/*
The runner container's sandbox settings as JSON, after the checks a schema cannot
make: {"mode": "bwrap"|"none", "seccomp": <SeccompProfile>, "appArmor":
<AppArmorProfile> (absent: the runtime's default)}. bwrap builds each job's
sandbox with unprivileged user, PID, mount, IPC, UTS and network namespaces and
mounts a /proc of its own: the container needs a seccomp profile that allows
those calls (Localhost: deploy/docker/seccomp-runner.json; Unconfined), an
unmasked /proc (procMount: Unmasked), which Kubernetes grants only to a pod in a
user namespace of its own (hostUsers: false). none: RuntimeDefault, nothing else.
include "hero.runnerSandbox" (list $ <runner values>)
*/}}
{{- define "hero.runnerSandbox" -}}
{{- $root := index . 0 }}
{{- $sb := (index . 1).sandbox }}
{{- $out := dict "mode" $sb.mode }}
{{- if eq $sb.mode "bwrap" }}
{{- if semverCompare "<1.31-0" $root.Capabilities.KubeVersion.Version }}
{{- fail (printf "runner.sandbox.mode=bwrap needs Kubernetes 1.31 or newer (the runner pod uses procMount: Unmasked with hostUsers: false; on by default from 1.33, 1.31 and 1.32 need the feature gates UserNamespacesSupport and ProcMountType), this is %s: upgrade, or run jobs without a sandbox with runner.sandbox.mode=none" $root.Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $s := $sb.seccompProfile }}
{{- if eq $s.type "Localhost" }}
{{- if not $s.localhostProfile }}
{{- fail "runner.sandbox.seccompProfile.type=Localhost needs runner.sandbox.seccompProfile.localhostProfile: the profile's path under the kubelet's seccomp directory (e.g. hero/seccomp-runner.json for /var/lib/kubelet/seccomp/hero/seccomp-runner.json)" }}
{{- end }}
{{- $_ := set $out "seccomp" (dict "type" "Localhost" "localhostProfile" $s.localhostProfile) }}
{{- else if eq $s.type "Unconfined" }}
{{- $_ := set $out "seccomp" (dict "type" "Unconfined") }}
{{- else }}
{{- fail (printf "runner.sandbox.seccompProfile.type=%s refuses the namespace and mount calls bubblewrap needs, so the runner would not start: use Localhost (deploy/docker/seccomp-runner.json on every node) or Unconfined, or run jobs without a sandbox with runner.sandbox.mode=none" $s.type) }}
{{- end }}
{{- else }}
{{- $_ := set $out "seccomp" (dict "type" "RuntimeDefault") }}
{{- end }}
{{- $a := $sb.appArmorProfile }}
{{- if eq $a.type "Localhost" }}
{{- if not $a.localhostProfile }}
{{- fail "runner.sandbox.appArmorProfile.type=Localhost needs runner.sandbox.appArmorProfile.localhostProfile: the name of a profile loaded on every node" }}
{{- end }}
{{- $_ := set $out "appArmor" (dict "type" "Localhost" "localhostProfile" $a.localhostProfile) }}
{{- else if $a.type }}
{{- $_ := set $out "appArmor" (dict "type" $a.type) }}
{{- end }}
{{- toJson $out }}
{{- end }}
