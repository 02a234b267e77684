package charttest

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The Secrets `heroctl pki k8s-secrets --prefix P` makes (cmd/heroctl/pkik8s.go;
// its tests check the same names): name → keys.
func pkiJobSecrets(prefix string, certs, users, operatorKey bool) map[string][]string {
	out := map[string][]string{}
	tlsKeys := []string{"ca.crt", "tls.crt", "tls.key"}
	if certs {
		out[prefix+"-ca"] = tlsKeys
		for _, l := range append([]string{"api", "redis", "operator"}, keysOf(components)...) {
			out[prefix+"-"+l+"-tls"] = tlsKeys
		}
	}
	if users {
		keys := []string{"redis-users.acl"}
		for _, u := range append(keysOf(components), "dispatcher", "operator") {
			keys = append(keys, "redis-password-"+u)
		}
		out[prefix+"-redis-users"] = keys
	}
	if operatorKey {
		out[prefix+"-operator-key"] = []string{"operator-secret-key"}
	}
	return out
}

// pkiJob is what the rendered hook Job says about itself.
type pkiJob struct {
	prefix, namespace   string
	certs, users, opKey bool
	days                int
	args                map[string][]string // --flag=value → values
}

func (r *release) pkiJob() (*pkiJob, bool) {
	jobs := r.jobs()
	if len(jobs) == 0 {
		return nil, false
	}
	c := jobs[0].Spec.Template.Spec.Containers[0]
	j := &pkiJob{args: map[string][]string{}}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
			j.args[k] = append(j.args[k], v)
		}
	}
	first := func(k string) string {
		if v := j.args[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	j.prefix, j.namespace = first("--prefix"), first("--namespace")
	j.certs, j.users, j.opKey = first("--certs") == "true", first("--redis-users") == "true", first("--operator-key") == "true"
	j.days, _ = strconv.Atoi(first("--days"))
	return j, true
}

// madeSecrets lists the Secrets the release makes without rendering them: those
// of the hook Job and of cert-manager's Certificates. Name → keys.
func (r *release) madeSecrets() map[string][]string {
	out := map[string][]string{}
	if j, ok := r.pkiJob(); ok {
		for n, keys := range pkiJobSecrets(j.prefix, j.certs, j.users, j.opKey) {
			out[n] = keys
		}
	}
	for _, c := range r.certificates() {
		out[c.Spec.SecretName] = []string{"ca.crt", "tls.crt", "tls.key"}
	}
	return out
}

func hookWeight(t *testing.T, where string, m metav1.ObjectMeta) int {
	t.Helper()
	if got := m.Annotations["helm.sh/hook"]; got != "pre-install,pre-upgrade" {
		t.Errorf("%s: helm.sh/hook %q, want pre-install,pre-upgrade", where, got)
	}
	if p := m.Annotations["helm.sh/hook-delete-policy"]; !strings.Contains(p, "before-hook-creation") || !strings.Contains(p, "hook-succeeded") {
		t.Errorf("%s: hook-delete-policy %q, want before-hook-creation,hook-succeeded", where, p)
	}
	w, err := strconv.Atoi(m.Annotations["helm.sh/hook-weight"])
	if err != nil {
		t.Errorf("%s: hook-weight %q is not an integer", where, m.Annotations["helm.sh/hook-weight"])
	}
	return w
}

// checkPKIJob: the hook Job, its ServiceAccount, Role and RoleBinding. The Role
// grants get on exactly the Secrets the Job makes (by name) and create on
// Secrets, nothing else; the three RBAC objects are hooks that exist before the
// Job (lower weight); the token is mounted into the Job's pod only.
func checkPKIJob(t *testing.T, r *release) {
	t.Helper()
	jobs := r.jobs()
	if len(jobs) == 0 {
		if len(r.roles()) > 0 || len(r.roleBindings()) > 0 {
			t.Errorf("a Role or RoleBinding without the hook Job")
		}
		return
	}
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs, want one (the PKI hook)", len(jobs))
	}
	job := jobs[0]
	where := "Job " + job.Name
	jw := hookWeight(t, where, job.ObjectMeta)
	pod := job.Spec.Template.Spec
	j, _ := r.pkiJob()
	if !j.certs && !j.users && !j.opKey {
		t.Errorf("%s: neither --certs, --redis-users nor --operator-key: it has nothing to do", where)
	}
	if j.namespace != job.Namespace || j.prefix == "" {
		t.Errorf("%s: --prefix %q --namespace %q", where, j.prefix, j.namespace)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || job.Spec.BackoffLimit == nil || job.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("%s: want restartPolicy Never, a backoffLimit and an activeDeadlineSeconds", where)
	}
	checkPKIJobPod(t, where, pod)
	sa := checkPKIServiceAccount(t, r, where, pod.ServiceAccountName, jw)
	checkPKIRBAC(t, r, job.Namespace, sa, jw)
	checkPKIRole(t, r.roles()[0], j)
}

// checkPKIJobPod: the Job's pod mounts its token (it calls the API), is locked
// down, runs heroctl pki k8s-secrets with no environment, and writes its keys to a
// memory emptyDir on /tmp, its only volume.
func checkPKIJobPod(t *testing.T, where string, pod corev1.PodSpec) {
	t.Helper()
	if !isTrue(pod.AutomountServiceAccountToken) {
		t.Errorf("%s: the pod does not mount its service account token (it calls the API)", where)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks is not false", where)
	}
	if psc := pod.SecurityContext; psc == nil || !isTrue(psc.RunAsNonRoot) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext is not non-root with RuntimeDefault seccomp", where)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", where, len(pod.Containers))
	}
	c := pod.Containers[0]
	checkPKIJobContainer(t, where, c)
	tmp := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tmp" })
	if tmp < 0 || pod.Volumes[tmp].EmptyDir == nil || pod.Volumes[tmp].EmptyDir.Medium != corev1.StorageMediumMemory ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "tmp" && m.MountPath == "/tmp" }) {
		t.Errorf("%s: keys are written to /tmp, which must be a memory emptyDir", where)
	}
	if len(pod.Volumes) != 1 {
		t.Errorf("%s: volumes %v, want only tmp", where, pod.Volumes)
	}
}

// checkPKIJobContainer: the Job's container runs heroctl pki k8s-secrets, locked
// down, with a memory request and limit and no environment.
func checkPKIJobContainer(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if !slices.Equal(c.Command, []string{"/usr/local/bin/heroctl"}) || len(c.Args) < 2 || c.Args[0] != "pki" || c.Args[1] != "k8s-secrets" {
		t.Errorf("%s: runs %v %v, want heroctl pki k8s-secrets", where, c.Command, c.Args)
	}
	if sc := c.SecurityContext; sc == nil || !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: container securityContext not locked down", where)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: no memory request and limit", where)
	}
	if len(c.Env) > 0 || len(c.EnvFrom) > 0 {
		t.Errorf("%s: has environment variables; it needs none", where)
	}
}

// checkPKIServiceAccount: the Job's ServiceAccount (name) is a hook before the Job
// (weight below jw), does not mount its token by default, and no workload runs as
// it. It returns it.
func checkPKIServiceAccount(t *testing.T, r *release, where, name string, jw int) *corev1.ServiceAccount {
	t.Helper()
	sa := r.serviceAccount(name)
	if sa == nil {
		t.Fatalf("%s: ServiceAccount %q not rendered", where, name)
	}
	if hookWeight(t, "ServiceAccount "+sa.Name, sa.ObjectMeta) >= jw {
		t.Errorf("ServiceAccount %s: hook-weight not below the Job's", sa.Name)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s: automountServiceAccountToken not false (only the Job's pod asks for it)", sa.Name)
	}
	for _, w := range r.workloads() {
		if w.pod.Spec.ServiceAccountName == sa.Name {
			t.Errorf("%s: runs as the PKI Job's ServiceAccount", w)
		}
	}
	return sa
}

// checkPKIRBAC: one Role and one RoleBinding, which binds that Role to the Job's
// ServiceAccount alone; both hooks before the Job.
func checkPKIRBAC(t *testing.T, r *release, namespace string, sa *corev1.ServiceAccount, jw int) {
	t.Helper()
	if len(r.roleBindings()) != 1 || len(r.roles()) != 1 {
		t.Fatalf("%d Roles and %d RoleBindings, want one each (the Job's)", len(r.roles()), len(r.roleBindings()))
	}
	rb, role := r.roleBindings()[0], r.roles()[0]
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) {
		t.Errorf("RoleBinding %s: roleRef %+v, want Role %s", rb.Name, rb.RoleRef, role.Name)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: namespace}) {
		t.Errorf("RoleBinding %s: subjects %+v, want only ServiceAccount %s/%s", rb.Name, rb.Subjects, namespace, sa.Name)
	}
	for _, m := range []metav1.ObjectMeta{rb.ObjectMeta, role.ObjectMeta} {
		if hookWeight(t, m.Name, m) >= jw {
			t.Errorf("%s: hook-weight not below the Job's", m.Name)
		}
	}
}

// checkPKIRole: the Role grants get on exactly the Secrets the Job makes (by name)
// and create on Secrets, nothing else.
func checkPKIRole(t *testing.T, role *rbacv1.Role, j *pkiJob) {
	t.Helper()
	want := keysOf(pkiJobSecrets(j.prefix, j.certs, j.users, j.opKey))
	verbs := map[string]bool{}
	for i, rule := range role.Rules {
		if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"secrets"}) || len(rule.NonResourceURLs) > 0 {
			t.Errorf("Role %s rule %d: %+v is not about core Secrets alone", role.Name, i, rule)
		}
		for _, v := range rule.Verbs {
			verbs[v] = true
			switch v {
			case "get":
				got := slices.Sorted(slices.Values(rule.ResourceNames))
				if !slices.Equal(got, want) {
					t.Errorf("Role %s: get on %v, want exactly the Job's Secrets %v", role.Name, got, want)
				}
			case "create":
			default:
				t.Errorf("Role %s: verb %q; the Job needs get and create only", role.Name, v)
			}
		}
	}
	if !verbs["get"] || !verbs["create"] {
		t.Errorf("Role %s: verbs %v, want get and create", role.Name, keysOf(verbs))
	}
}

// checkCertificates: cert-manager's objects fit together. Every Certificate
// writes the Secret of its own name with an issuer that is rendered (or expected
// outside); the chart's root CA is self-signed and backs a CA Issuer; each
// service's certificate names <service>.hero.internal first (the identity its
// peers check) and serves both ends of mutual TLS.
func checkCertificates(t *testing.T, r *release, out outside) {
	t.Helper()
	for _, c := range r.certificates() {
		where := "Certificate " + c.Name
		if c.Spec.SecretName != c.Name {
			t.Errorf("%s: secretName %q, want its own name", where, c.Spec.SecretName)
		}
		ref := c.Spec.IssuerRef
		if ref.Group != "cert-manager.io" {
			t.Errorf("%s: issuerRef group %q", where, ref.Group)
		}
		if ref.Kind == "Issuer" && r.issuer(ref.Name) != nil {
			// rendered
		} else if !slices.Contains(out.issuers, ref.Kind+"/"+ref.Name) {
			t.Errorf("%s: issuer %s/%s is neither rendered nor expected", where, ref.Kind, ref.Name)
		}
		if c.Spec.PrivateKey == nil || c.Spec.PrivateKey.Algorithm != cmv1.ECDSAKeyAlgorithm {
			t.Errorf("%s: private key is not ECDSA", where)
		}
		if c.Spec.IsCA {
			checkCACertificate(t, r, c, where)
			continue
		}
		if d, rb := c.Spec.Duration, c.Spec.RenewBefore; d == nil || rb == nil || rb.Duration >= d.Duration {
			t.Errorf("%s: want a duration longer than renewBefore", where)
		}
		if ref.Kind == "Issuer" {
			if iss := r.issuer(ref.Name); iss != nil && iss.Spec.CA == nil {
				t.Errorf("%s: issued by %s, which is not a CA Issuer", where, ref.Name)
			}
		}
		checkCertificateIdentity(t, r, c, where)
	}
	// The same Secrets as the hook Job would make, the CA's aside with an issuer of one's own.
	if len(r.certificates()) > 0 {
		var got []string
		for _, c := range r.certificates() {
			got = append(got, c.Spec.SecretName)
		}
		sort.Strings(got)
		want := keysOf(pkiJobSecrets(fullnameOf(r), true, false, false))
		if !slices.Contains(got, fullnameOf(r)+"-ca") {
			want = slices.DeleteFunc(want, func(s string) bool { return s == fullnameOf(r)+"-ca" })
		}
		if !slices.Equal(got, want) {
			t.Errorf("Certificates write %v, want %v", got, want)
		}
	}
}

// checkCACertificate: the chart's root CA is issued by a rendered self-signed
// Issuer and backs a CA Issuer.
func checkCACertificate(t *testing.T, r *release, c *cmv1.Certificate, where string) {
	t.Helper()
	iss := r.issuer(c.Spec.IssuerRef.Name)
	if iss == nil || iss.Spec.SelfSigned == nil {
		t.Errorf("%s: a CA certificate not issued by a rendered self-signed Issuer", where)
	}
	backed := false
	for _, o := range r.all("Issuer") {
		if i := o.Obj.(*cmv1.Issuer); i.Spec.CA != nil && i.Spec.CA.SecretName == c.Spec.SecretName {
			backed = true
		}
	}
	if !backed {
		t.Errorf("%s: no CA Issuer uses its Secret", where)
	}
}

// checkCertificateIdentity: each service's certificate names
// <service>.hero.internal first (the identity its peers check) and serves both ends
// of mutual TLS; the operator's is a client certificate, the API's and Redis's
// server certificates; no other is of the layout.
func checkCertificateIdentity(t *testing.T, r *release, c *cmv1.Certificate, where string) {
	t.Helper()
	svc := strings.TrimSuffix(strings.TrimPrefix(c.Name, fullnameOf(r)+"-"), "-tls")
	usages := map[cmv1.KeyUsage]bool{}
	for _, u := range c.Spec.Usages {
		usages[u] = true
	}
	switch {
	case components[svc].ports != nil:
		if len(c.Spec.DNSNames) == 0 || c.Spec.DNSNames[0] != svc+".hero.internal" {
			t.Errorf("%s: first DNS name %v, want %s.hero.internal", where, c.Spec.DNSNames, svc)
		}
		if !usages[cmv1.UsageServerAuth] || !usages[cmv1.UsageClientAuth] {
			t.Errorf("%s: usages %v, want server auth and client auth", where, c.Spec.Usages)
		}
	case svc == "operator":
		if !slices.Equal(c.Spec.DNSNames, []string{"operator.hero.internal"}) || !usages[cmv1.UsageClientAuth] || usages[cmv1.UsageServerAuth] {
			t.Errorf("%s: want a client certificate for operator.hero.internal", where)
		}
	case svc == "api" || svc == "redis":
		if !usages[cmv1.UsageServerAuth] {
			t.Errorf("%s: not a server certificate", where)
		}
	default:
		t.Errorf("%s: not a certificate of the layout", where)
	}
}

// fullnameOf: the release's object-name prefix, read off the scheduler's or any
// service's Deployment ("<prefix>-<component>").
func fullnameOf(r *release) string {
	for _, w := range r.workloads() {
		if comp := w.pod.Labels[labelComponent]; comp != "" {
			return strings.TrimSuffix(w.name, "-"+comp)
		}
	}
	return ""
}

// secretFile resolves a file path in a container to the Secret and key mounted
// there (read-only); ok is false when no Secret volume holds that path.
func secretFile(pod corev1.PodSpec, c corev1.Container, p string) (secret, key string, ok bool) {
	for _, m := range c.VolumeMounts {
		rel, found := strings.CutPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !found || !m.ReadOnly {
			continue
		}
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Volumes[i].Secret == nil {
			continue
		}
		s := pod.Volumes[i].Secret
		if len(s.Items) == 0 {
			return s.SecretName, rel, true
		}
		for _, it := range s.Items {
			if it.Path == rel {
				return s.SecretName, it.Key, true
			}
		}
	}
	return "", "", false
}

// checkTLSWiring: with certificates in the release, every service gets its own
// certificate Secret (and no other service's), read-only, and TLS_CA, TLS_CERT
// and TLS_KEY pointing into it; the supervisor-daemon also the API's certificate
// (API_TLS_CERT, API_TLS_KEY). Without, none of that. Each service's REDIS_URL
// names its own ACL user, with REDIS_PASSWORD_FILE mounted from its own key of the
// Redis users' Secret and no password in the URL; the bundled Redis gets the ACL
// file alone, and serves TLS with client certificates when the services dial
// rediss://.
func checkTLSWiring(t *testing.T, r *release) {
	t.Helper()
	made := r.madeSecrets()
	prefix := fullnameOf(r)
	tw := tlsWiring{t: t, r: r, made: made, prefix: prefix,
		tlsOn: made[prefix+"-scheduler-tls"] != nil || made[prefix+"-supervisor-daemon-tls"] != nil,
		users: made[prefix+"-redis-users"] != nil}
	for comp := range components {
		w, ok := r.component(comp)
		if !ok {
			continue
		}
		spec := w.pod.Spec
		c := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == comp })]
		tw.serviceTLSFiles(w, comp, c)
		tw.serviceTLSVolumes(w, comp)
		tw.serviceRedis(w, comp, c)
	}
	if bundled := r.redis(); bundled != nil {
		tw.bundledRedis(bundled)
	}
}

// tlsWiring is what checkTLSWiring checks each workload against: the Secrets the
// release makes (made), its name prefix, whether it has certificates (tlsOn) and
// Redis ACL users (users).
type tlsWiring struct {
	t            *testing.T
	r            *release
	made         map[string][]string
	prefix       string
	tlsOn, users bool
}

// serviceTLSFiles: TLS_CA, TLS_CERT and TLS_KEY (and the supervisor-daemon's
// API_TLS_CERT, API_TLS_KEY) name the read-only files of the service's own
// certificate Secret when the release has certificates, and are unset when not.
func (tw tlsWiring) serviceTLSFiles(w workload, comp string, c corev1.Container) {
	t := tw.t
	t.Helper()
	env := envOf(c)
	wantFiles := map[string]string{}
	if tw.tlsOn {
		for k, v := range map[string]string{"TLS_CA": "ca.crt", "TLS_CERT": "tls.crt", "TLS_KEY": "tls.key"} {
			wantFiles[k] = tw.prefix + "-" + comp + "-tls/" + v
		}
		if comp == "supervisor-daemon" {
			wantFiles["API_TLS_CERT"] = tw.prefix + "-api-tls/tls.crt"
			wantFiles["API_TLS_KEY"] = tw.prefix + "-api-tls/tls.key"
		}
	}
	for _, name := range []string{"TLS_CA", "TLS_CERT", "TLS_KEY", "API_TLS_CERT", "API_TLS_KEY"} {
		e, set := env[name]
		want, wanted := wantFiles[name]
		if !wanted {
			if set {
				t.Errorf("%s: %s set although the release has no certificate for it", w, name)
			}
			continue
		}
		sec, key, ok := secretFile(w.pod.Spec, c, e.Value)
		if !set || !ok || sec+"/"+key != want {
			t.Errorf("%s: %s=%q is not the read-only file %s (got %s/%s)", w, name, e.Value, want, sec, key)
		}
	}
}

// serviceTLSVolumes: a service mounts no other identity's certificate Secret, and
// none that nothing makes.
func (tw tlsWiring) serviceTLSVolumes(w workload, comp string) {
	t := tw.t
	t.Helper()
	for _, v := range w.pod.Spec.Volumes {
		if v.Secret == nil || !strings.HasSuffix(v.Secret.SecretName, "-tls") {
			continue
		}
		if n := v.Secret.SecretName; n != tw.prefix+"-"+comp+"-tls" && (comp != "supervisor-daemon" || n != tw.prefix+"-api-tls") {
			t.Errorf("%s: mounts %s, another identity's key", w, n)
		}
		if _, ok := tw.made[v.Secret.SecretName]; !ok && tw.r.secret(v.Secret.SecretName) == nil {
			t.Errorf("%s: mounts Secret %s, which nothing makes", w, v.Secret.SecretName)
		}
	}
}

// serviceRedis: REDIS_URL names the service's own ACL user (when the release has
// users), with no password in it; REDIS_PASSWORD_FILE is its own key of the Redis
// users' Secret; over rediss:// to the bundled Redis, its own certificate.
func (tw tlsWiring) serviceRedis(w workload, comp string, c corev1.Container) {
	t := tw.t
	t.Helper()
	env := envOf(c)
	e := env["REDIS_URL"]
	if e.ValueFrom != nil {
		if tw.users {
			t.Errorf("%s: REDIS_URL from a Secret although the services have ACL users", w)
		}
		return
	}
	u, err := url.Parse(e.Value)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		t.Errorf("%s: REDIS_URL %q", w, redact(e.Value))
		return
	}
	if _, has := u.User.Password(); has {
		t.Errorf("%s: REDIS_URL carries a password in a plain variable", w)
	}
	pwFile, hasPW := env["REDIS_PASSWORD_FILE"]
	if tw.users {
		if u.User.Username() != comp {
			t.Errorf("%s: REDIS_URL %q does not name the service's own user %q", w, e.Value, comp)
		}
		tw.servicePasswordFile(w, comp, c, pwFile.Value, hasPW)
	} else if u.User != nil || hasPW {
		t.Errorf("%s: a Redis user or password file without ACL users", w)
	}
	if u.Scheme == "rediss" && tw.tlsOn && tw.r.redis() != nil {
		for k, v := range map[string]string{"REDIS_TLS_CA": "ca.crt", "REDIS_TLS_CERT": "tls.crt", "REDIS_TLS_KEY": "tls.key"} {
			sec, key, ok := secretFile(w.pod.Spec, c, env[k].Value)
			if !ok || sec != tw.prefix+"-"+comp+"-tls" || key != v {
				t.Errorf("%s: %s=%q is not its own certificate's %s", w, k, env[k].Value, v)
			}
		}
	}
}

// servicePasswordFile: REDIS_PASSWORD_FILE (pwFile, set: hasPW) is the service's own
// key of the Redis users' Secret, and the service mounts no other key of it.
func (tw tlsWiring) servicePasswordFile(w workload, comp string, c corev1.Container, pwFile string, hasPW bool) {
	t := tw.t
	t.Helper()
	sec, key, ok := secretFile(w.pod.Spec, c, pwFile)
	if !hasPW || !ok || sec != tw.prefix+"-redis-users" || key != "redis-password-"+comp {
		t.Errorf("%s: REDIS_PASSWORD_FILE=%q is not its own key of %s-redis-users (got %s/%s)", w, pwFile, tw.prefix, sec, key)
	}
	for _, v := range w.pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tw.prefix+"-redis-users" && (len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "redis-password-"+comp) {
			t.Errorf("%s: mounts more of the Redis users' Secret than its own password: %+v", w, v.Secret.Items)
		}
	}
}

// bundledRedis: the bundled Redis gets the ACL file alone (no password), is
// protected with users and not without, serves TLS only, with client
// certificates, when it has a TLS port, and its probes agree.
func (tw tlsWiring) bundledRedis(sts *appsv1.StatefulSet) {
	t := tw.t
	t.Helper()
	redis := sts.Spec.Template.Spec
	rc := redis.Containers[0]
	args := strings.Join(rc.Args, " ")
	for _, e := range rc.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("StatefulSet %s: env %s from a Secret; Redis needs no password", sts.Name, e.Name)
		}
	}
	if tw.users {
		tw.bundledRedisACL(sts, args)
	} else if !strings.Contains(args, "--protected-mode no") || strings.Contains(args, "--aclfile") {
		t.Errorf("StatefulSet %s: without users want --protected-mode no and no --aclfile: %s", sts.Name, args)
	}
	if redisArg(sts, "--tls-port") != "" {
		if !tw.tlsOn || redisArg(sts, "--port") != "0" || redisArg(sts, "--tls-auth-clients") != "yes" || redisArg(sts, "--tls-port") != "6379" {
			t.Errorf("StatefulSet %s: TLS must be the only port (6379, --port 0) with client certificates: %s", sts.Name, args)
		}
		for flag, key := range map[string]string{"--tls-cert-file": "tls.crt", "--tls-key-file": "tls.key", "--tls-ca-cert-file": "ca.crt"} {
			sec, k, ok := secretFile(redis, rc, redisArg(sts, flag))
			if !ok || sec != tw.prefix+"-redis-tls" || k != key {
				t.Errorf("StatefulSet %s: %s is not %s-redis-tls's %s", sts.Name, flag, tw.prefix, key)
			}
		}
	}
	for _, p := range []*corev1.Probe{rc.StartupProbe, rc.LivenessProbe, rc.ReadinessProbe} {
		if p == nil || p.Exec == nil || !strings.Contains(strings.Join(p.Exec.Command, " "), "redis-cli") {
			t.Errorf("StatefulSet %s: a probe is not redis-cli", sts.Name)
			continue
		}
		if cmd := strings.Join(p.Exec.Command, " "); strings.Contains(cmd, "--tls") != (redisArg(sts, "--tls-port") != "") {
			t.Errorf("StatefulSet %s: probe %q and Redis disagree about TLS", sts.Name, cmd)
		}
	}
}

// bundledRedisACL: with users, --aclfile is the ACL file of the Redis users'
// Secret, mounted alone (not the passwords), and protected mode stays on.
func (tw tlsWiring) bundledRedisACL(sts *appsv1.StatefulSet, args string) {
	t := tw.t
	t.Helper()
	redis := sts.Spec.Template.Spec
	f := redisArg(sts, "--aclfile")
	sec, key, ok := secretFile(redis, redis.Containers[0], f)
	if !ok || sec != tw.prefix+"-redis-users" || key != "redis-users.acl" {
		t.Errorf("StatefulSet %s: --aclfile %q is not the ACL file of %s-redis-users", sts.Name, f, tw.prefix)
	}
	for _, v := range redis.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tw.prefix+"-redis-users" && (len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "redis-users.acl") {
			t.Errorf("StatefulSet %s: mounts the passwords, not only the ACL file", sts.Name)
		}
	}
	if strings.Contains(args, "--protected-mode no") {
		t.Errorf("StatefulSet %s: --protected-mode no with ACL users", sts.Name)
	}
}

// admitted is who a NetworkPolicy lets in on one named port.
type admitted struct {
	components []string // release pods (by component label) picked by podSelector peers
	outside    int      // peers with a namespaceSelector or ipBlock
	anyone     bool     // a rule without `from`
}

func (a admitted) String() string {
	return fmt.Sprintf("components %v, %d outside peers, anyone %v", a.components, a.outside, a.anyone)
}

func ingressOn(r *release, np *networkingv1.NetworkPolicy, port string) admitted {
	var a admitted
	seen := map[string]bool{}
	for _, rule := range np.Spec.Ingress {
		covers := len(rule.Ports) == 0
		for _, p := range rule.Ports {
			if p.Port == nil || p.Port.StrVal == port {
				covers = true
			}
		}
		if !covers {
			continue
		}
		if len(rule.From) == 0 {
			a.anyone = true
		}
		for _, peer := range rule.From {
			if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil {
				a.outside++
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil || sel.Empty() {
				a.anyone = true // every pod of the namespace
				continue
			}
			var podLabels []map[string]string
			for _, w := range r.workloads() {
				podLabels = append(podLabels, w.pod.Labels)
			}
			for _, o := range r.all("Pod") {
				podLabels = append(podLabels, o.Meta.Labels)
			}
			for _, l := range podLabels {
				if sel.Matches(labels.Set(l)) && !seen[l[labelComponent]] {
					seen[l[labelComponent]] = true
					a.components = append(a.components, l[labelComponent])
				}
			}
		}
	}
	sort.Strings(a.components)
	return a
}

// checkNetworkPolicyPeers: each internal gRPC port admits exactly the services
// that call it; the public API anyone or apiFrom, no release pod needed; admin
// ports only adminFrom (outside peers) and the helm test Pod; the bundled Redis
// exactly the services.
func checkNetworkPolicyPeers(t *testing.T, r *release) {
	t.Helper()
	var rendered []string
	for comp := range components {
		if _, ok := r.component(comp); ok {
			rendered = append(rendered, comp)
		}
	}
	sort.Strings(rendered)
	_, hasTest := r.find("Pod", fullnameOf(r)+"-test")
	for _, np := range r.networkPolicies() {
		sel, _ := mustSelector(&np.Spec.PodSelector)
		ws := r.selectedWorkloads(sel)
		if len(ws) != 1 {
			continue // checkNetworkPolicies reports it
		}
		comp := ws[0].pod.Labels[labelComponent]
		where := "NetworkPolicy " + np.Name
		if comp == "redis" {
			if a := ingressOn(r, np, "redis"); !slices.Equal(a.components, rendered) || a.outside > 0 || a.anyone {
				t.Errorf("%s: Redis admits %s, want exactly the services %v", where, a, rendered)
			}
			continue
		}
		if comp == "supervisor-daemon" {
			for _, port := range []string{"http", "grpc"} {
				a := ingressOn(r, np, port)
				if len(a.components) > 0 || (!a.anyone && a.outside == 0) {
					t.Errorf("%s: public %s admits %s, want anyone or networkPolicy.apiFrom", where, port, a)
				}
			}
		} else {
			var want []string
			for _, caller := range components[comp].callers {
				if slices.Contains(rendered, caller) {
					want = append(want, caller)
				}
			}
			if a := ingressOn(r, np, "grpc"); !slices.Equal(a.components, want) || a.outside > 0 || a.anyone {
				t.Errorf("%s: grpc admits %s, want exactly its callers %v", where, a, want)
			}
		}
		a := ingressOn(r, np, "admin")
		var want []string
		if hasTest {
			want = []string{"test"}
		}
		if !slices.Equal(a.components, want) || a.anyone {
			t.Errorf("%s: admin admits %s, want only adminFrom and the test Pod %v", where, a, want)
		}
	}
}
