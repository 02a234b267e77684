package charttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The kinds the chart may render, by "apiVersion/kind". Anything else is an error
// (a ClusterRole, say). cert-manager's objects are decoded strictly into their Go
// types too (github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1).
var knownKinds = map[string]func() any{
	"v1/ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                                func() any { return &corev1.Secret{} },
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"v1/Pod":                                   func() any { return &corev1.Pod{} }, // the helm test hook
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":   func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor":  func() any { return &monitoringv1.ServiceMonitor{} },
	"batch/v1/Job":                             func() any { return &batchv1.Job{} }, // the PKI hook
	"rbac.authorization.k8s.io/v1/Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"cert-manager.io/v1/Certificate":           func() any { return &cmv1.Certificate{} },
	"cert-manager.io/v1/Issuer":                func() any { return &cmv1.Issuer{} },
}

// object is one decoded document of a rendered file.
type object struct {
	Source string // "<file>#<n>: <helm's # Source: comment>"
	Kind   string // "apiVersion/kind"
	Meta   *metav1.ObjectMeta
	Obj    any // pointer to the typed object
}

func (o object) String() string {
	return fmt.Sprintf("%s %s/%s (%s)", o.Kind, o.Meta.Namespace, o.Meta.Name, o.Source)
}

// decodeFile splits a multi-document YAML file and decodes each document
// strictly into its API type: duplicate keys, unknown fields, unknown kinds and
// trailing data are errors.
func decodeFile(path string) ([]object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []object
	var errs []error
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading document %d: %w", path, n, err)
		}
		src := fmt.Sprintf("%s#%d", path, n)
		if s := sourceComment(doc); s != "" {
			src += ": " + s
		}
		o, err := decodeDoc(doc, src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if o != nil {
			out = append(out, *o)
		}
	}
	return out, errors.Join(errs...)
}

func sourceComment(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return s
		}
	}
	return ""
}

func decodeDoc(doc []byte, src string) (*object, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid YAML: %w", src, err)
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil, nil // empty document (comments only)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("%s: not an object: %w", src, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, fmt.Errorf("%s: document without apiVersion or kind", src)
	}
	kind := tm.APIVersion + "/" + tm.Kind
	newObj, ok := knownKinds[kind]
	if !ok {
		return nil, fmt.Errorf("%s: unknown kind %q (not one the chart is allowed to render)", src, kind)
	}
	obj := newObj()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s: %s does not decode strictly: %w", src, kind, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: trailing data after the object", src)
	}
	meta, err := objectMeta(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	return &object{Source: src, Kind: kind, Meta: meta, Obj: obj}, nil
}

func objectMeta(obj any) (*metav1.ObjectMeta, error) {
	type metaObject interface{ GetObjectMeta() metav1.Object }
	// cert-manager's issuers define GetObjectMeta with another result type.
	type cmMetaObject interface{ GetObjectMeta() *metav1.ObjectMeta }
	switch m := obj.(type) {
	case metaObject:
		if om, ok := m.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return om, nil
		}
	case cmMetaObject:
		return m.GetObjectMeta(), nil
	}
	return nil, fmt.Errorf("%T has no ObjectMeta", obj)
}
