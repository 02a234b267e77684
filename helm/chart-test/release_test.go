package charttest

import (
	"fmt"
	"sort"
	"strings"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The five services: component label → the settings every one of them gets.
type componentSpec struct {
	ports   map[string]int32 // container port name → default number (docs/ports.md)
	addrEnv map[string]string
	env     []string // variables the chart must set besides the common ones
	peers   map[string]string
	callers []string // services admitted to its internal gRPC port (lib/app Serving.Peers)
}

var components = map[string]componentSpec{
	"supervisor-daemon": {
		ports:   map[string]int32{"http": 9652, "grpc": 9653, "admin": 9660},
		addrEnv: map[string]string{"http": "HTTP_ADDR", "grpc": "GRPC_ADDR", "admin": "ADMIN_ADDR"},
		env:     []string{"HERO_ADMIN_SECRET", "SCHEDULER_ADDR", "OPERATOR_SECRET_KEY_FILE"},
		peers:   map[string]string{"SCHEDULER_ADDR": "scheduler"},
	},
	"scheduler": {
		ports:   map[string]int32{"grpc": 9654, "admin": 9661},
		addrEnv: map[string]string{"grpc": "GRPC_ADDR", "admin": "ADMIN_ADDR"},
		callers: []string{"router", "supervisor-daemon"},
	},
	"router": {
		ports:   map[string]int32{"grpc": 9655, "admin": 9662},
		addrEnv: map[string]string{"grpc": "GRPC_ADDR", "admin": "ADMIN_ADDR"},
		env:     []string{"SCHEDULER_ADDR", "GATEWAY_ADDR"},
		peers:   map[string]string{"SCHEDULER_ADDR": "scheduler", "GATEWAY_ADDR": "mycelium-gateway"},
		callers: []string{"mycelium-gateway"},
	},
	"runner": {
		ports:   map[string]int32{"grpc": 9656, "admin": 9663},
		addrEnv: map[string]string{"grpc": "GRPC_ADDR", "admin": "ADMIN_ADDR"},
		env:     []string{"RUNNER_ID", "RUNNER_CONTEXTS", "SCRIPT_TYPES", "CONCURRENCY"},
		callers: nil, // RunnerControl/StopJob: the operator certificate only
	},
	"mycelium-gateway": {
		ports:   map[string]int32{"grpc": 9657, "admin": 9664},
		addrEnv: map[string]string{"grpc": "GRPC_ADDR", "admin": "ADMIN_ADDR"},
		env:     []string{"MYCELIUM_URL", "ROUTER_ADDR"},
		peers:   map[string]string{"ROUTER_ADDR": "router"},
		callers: []string{"router"},
	},
}

const (
	labelName      = "app.kubernetes.io/name"
	labelInstance  = "app.kubernetes.io/instance"
	labelComponent = "app.kubernetes.io/component"
)

// release is the decoded output of one `helm template`.
type release struct {
	file string
	objs []object
}

func (r *release) all(kind string) []object {
	var out []object
	for _, o := range r.objs {
		if o.Kind == kind || strings.HasSuffix(o.Kind, "/"+kind) {
			out = append(out, o)
		}
	}
	return out
}

func (r *release) count(kind string) int { return len(r.all(kind)) }

func (r *release) find(kind, name string) (object, bool) {
	for _, o := range r.all(kind) {
		if o.Meta.Name == name {
			return o, true
		}
	}
	return object{}, false
}

func (r *release) deployments() []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, o := range r.all("Deployment") {
		out = append(out, o.Obj.(*appsv1.Deployment))
	}
	return out
}

func (r *release) statefulSets() []*appsv1.StatefulSet {
	var out []*appsv1.StatefulSet
	for _, o := range r.all("StatefulSet") {
		out = append(out, o.Obj.(*appsv1.StatefulSet))
	}
	return out
}

// redis is the bundled Redis StatefulSet, nil when it is not rendered.
func (r *release) redis() *appsv1.StatefulSet {
	for _, s := range r.statefulSets() {
		if s.Spec.Template.Labels[labelComponent] == "redis" {
			return s
		}
	}
	return nil
}

func (r *release) services() []*corev1.Service {
	var out []*corev1.Service
	for _, o := range r.all("Service") {
		out = append(out, o.Obj.(*corev1.Service))
	}
	return out
}

func (r *release) secret(name string) *corev1.Secret {
	if o, ok := r.find("Secret", name); ok {
		return o.Obj.(*corev1.Secret)
	}
	return nil
}

func (r *release) configMap(name string) *corev1.ConfigMap {
	if o, ok := r.find("ConfigMap", name); ok {
		return o.Obj.(*corev1.ConfigMap)
	}
	return nil
}

func (r *release) service(name string) *corev1.Service {
	if o, ok := r.find("Service", name); ok {
		return o.Obj.(*corev1.Service)
	}
	return nil
}

func (r *release) hpas() []*autoscalingv2.HorizontalPodAutoscaler {
	var out []*autoscalingv2.HorizontalPodAutoscaler
	for _, o := range r.all("HorizontalPodAutoscaler") {
		out = append(out, o.Obj.(*autoscalingv2.HorizontalPodAutoscaler))
	}
	return out
}

func (r *release) pdbs() []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, o := range r.all("PodDisruptionBudget") {
		out = append(out, o.Obj.(*policyv1.PodDisruptionBudget))
	}
	return out
}

func (r *release) networkPolicies() []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, o := range r.all("NetworkPolicy") {
		out = append(out, o.Obj.(*networkingv1.NetworkPolicy))
	}
	return out
}

func (r *release) serviceMonitors() []*monitoringv1.ServiceMonitor {
	var out []*monitoringv1.ServiceMonitor
	for _, o := range r.all("ServiceMonitor") {
		out = append(out, o.Obj.(*monitoringv1.ServiceMonitor))
	}
	return out
}

func (r *release) jobs() []*batchv1.Job {
	var out []*batchv1.Job
	for _, o := range r.all("Job") {
		out = append(out, o.Obj.(*batchv1.Job))
	}
	return out
}

func (r *release) roles() []*rbacv1.Role {
	var out []*rbacv1.Role
	for _, o := range r.all("Role") {
		out = append(out, o.Obj.(*rbacv1.Role))
	}
	return out
}

func (r *release) roleBindings() []*rbacv1.RoleBinding {
	var out []*rbacv1.RoleBinding
	for _, o := range r.all("RoleBinding") {
		out = append(out, o.Obj.(*rbacv1.RoleBinding))
	}
	return out
}

func (r *release) serviceAccount(name string) *corev1.ServiceAccount {
	if o, ok := r.find("ServiceAccount", name); ok {
		return o.Obj.(*corev1.ServiceAccount)
	}
	return nil
}

func (r *release) certificates() []*cmv1.Certificate {
	var out []*cmv1.Certificate
	for _, o := range r.all("Certificate") {
		out = append(out, o.Obj.(*cmv1.Certificate))
	}
	return out
}

func (r *release) issuer(name string) *cmv1.Issuer {
	if o, ok := r.find("Issuer", name); ok {
		return o.Obj.(*cmv1.Issuer)
	}
	return nil
}

// workload is a Deployment or StatefulSet, reduced to what the checks need.
type workload struct {
	kind, name string
	selector   *metav1.LabelSelector
	pod        *corev1.PodTemplateSpec
	sts        *appsv1.StatefulSet
	deploy     *appsv1.Deployment
}

func (w workload) String() string { return w.kind + " " + w.name }

// replicas is the workload's spec.replicas (nil: not set).
func (w workload) replicas() *int32 {
	if w.sts != nil {
		return w.sts.Spec.Replicas
	}
	return w.deploy.Spec.Replicas
}

func (r *release) workloads() []workload {
	var out []workload
	for _, d := range r.deployments() {
		out = append(out, workload{kind: "Deployment", name: d.Name, selector: d.Spec.Selector, pod: &d.Spec.Template, deploy: d})
	}
	for _, s := range r.statefulSets() {
		out = append(out, workload{kind: "StatefulSet", name: s.Name, selector: s.Spec.Selector, pod: &s.Spec.Template, sts: s})
	}
	return out
}

// heroWorkloads lists the workloads of the five services (not the bundled Redis).
func (r *release) heroWorkloads() []workload {
	var out []workload
	for _, w := range r.workloads() {
		if _, ok := components[w.pod.Labels[labelComponent]]; ok {
			out = append(out, w)
		}
	}
	return out
}

// component returns the workload of a component label, if rendered.
func (r *release) component(name string) (workload, bool) {
	for _, w := range r.workloads() {
		if w.pod.Labels[labelComponent] == name {
			return w, true
		}
	}
	return workload{}, false
}

// selectedWorkloads lists the workloads whose pods a selector (as a map or a
// LabelSelector) picks.
func (r *release) selectedWorkloads(sel labels.Selector) []workload {
	var out []workload
	if sel.Empty() {
		return nil
	}
	for _, w := range r.workloads() {
		if sel.Matches(labels.Set(w.pod.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func containerPortNames(pod *corev1.PodTemplateSpec) map[string]int32 {
	out := map[string]int32{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name != "" {
				out[p.Name] = p.ContainerPort
			}
		}
	}
	return out
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mustSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return nil, fmt.Errorf("no selector")
	}
	return metav1.LabelSelectorAsSelector(ls)
}
