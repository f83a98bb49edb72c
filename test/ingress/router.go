package ingress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	"knative.dev/serving/pkg/activator"
)

// HeaderRoutedTo is the header the Router answers with: the Revision whose
// queue-proxy it sent the request to.
const HeaderRoutedTo = "Sluice-Stack-Routed-To"

// Router is the data path of the networking layer's stand-in: it routes a
// request the way the KIngress Knative programmed says — the rule whose
// hosts hold the request's host, the first of its paths whose header
// matches hold (Knative puts the Knative-Serving-Tag paths of its
// tag-header-based-routing first), and that path's splits by percent — to
// one of the chosen Revision's real queue-proxies. A Revision with none
// (its pods on the stand-in for their stats) is answered 503. It is what
// lets a test send a request "through the ingress"; Knative's own route
// reconciler decides every rule it follows.
type Router struct {
	Client    netclient.Interface
	Namespace string
	// Targets are a Revision's real queue-proxies ("ip:port").
	Targets func(revision string) []string
	// HTTP reaches the pods' addresses (through the data plane).
	HTTP *http.Client

	next atomic.Uint64
}

func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	ings, err := rt.Client.NetworkingV1alpha1().Ingresses(rt.Namespace).List(r.Context(), metav1.ListOptions{})
	if err != nil {
		http.Error(w, "list KIngresses: "+err.Error(), http.StatusBadGateway)
		return
	}
	path, ok := match(ings.Items, host, r.Header)
	if !ok {
		http.Error(w, "no KIngress rule for host "+host, http.StatusNotFound)
		return
	}
	revision := rt.pick(path.Splits)
	addrs := rt.Targets(revision)
	if len(addrs) == 0 {
		http.Error(w, fmt.Sprintf("Revision %s has no real queue-proxy here", revision), http.StatusServiceUnavailable)
		return
	}
	addr := addrs[rt.next.Add(1)%uint64(len(addrs))]
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addr+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Header = r.Header.Clone()
	for k, v := range path.AppendHeaders {
		req.Header.Set(k, v)
	}
	resp, err := rt.HTTP.Do(req)
	if err != nil {
		http.Error(w, "queue-proxy of "+revision+": "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set(HeaderRoutedTo, revision)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// match finds the path a request to host with headers h takes.
func match(ings []netv1alpha1.Ingress, host string, h http.Header) (netv1alpha1.HTTPIngressPath, bool) {
	for _, ing := range ings {
		for _, rule := range ing.Spec.Rules {
			if rule.HTTP == nil || !slices.Contains(rule.Hosts, host) {
				continue
			}
			for _, p := range rule.HTTP.Paths {
				if headersMatch(p.Headers, h) && len(p.Splits) > 0 {
					return p, true
				}
			}
		}
	}
	return netv1alpha1.HTTPIngressPath{}, false
}

func headersMatch(want map[string]netv1alpha1.HeaderMatch, h http.Header) bool {
	for k, m := range want {
		if h.Get(k) != m.Exact {
			return false
		}
	}
	return true
}

// pick chooses a split by percent, spreading requests evenly, and names
// its Revision (the header Knative appends for the activator).
func (rt *Router) pick(splits []netv1alpha1.IngressBackendSplit) string {
	n := int(rt.next.Add(1) % 100)
	for _, s := range splits {
		if n < s.Percent {
			return s.AppendHeaders[activator.RevisionHeaderName]
		}
		n -= s.Percent
	}
	return splits[len(splits)-1].AppendHeaders[activator.RevisionHeaderName]
}
