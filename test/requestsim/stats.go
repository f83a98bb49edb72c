package requestsim

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"knative.dev/networking/pkg/http/header"
	"knative.dev/serving/pkg/apis/serving"
	"knative.dev/serving/pkg/autoscaler/metrics"
)

// Stats answers Knative's autoscaler as each pod's queue-proxy would on
// its stats port (9090, /metrics, Knative's protobuf Stat): the pod is the
// one whose IP the scrape was sent to, and its load is its Revision's share
// of the simulated requests, spread over the Revision's ready pods. The
// stack routes every pod IP to the one listener this is served on, so the
// autoscaler scrapes pods as in a cluster and scales Revisions for real.
type Stats struct {
	Sim       *Sim
	Kube      kubernetes.Interface
	Namespace string

	pods func() ([]*corev1.Pod, error)

	mu      sync.Mutex
	scrapes map[string]int // by pod IP
}

// Scrapes is how many scrapes of pod IP ip the stand-in answered: none
// for a pod whose real queue-proxy the stack runs.
func (st *Stats) Scrapes(ip string) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.scrapes[ip]
}

// Run watches the namespace's pods until ctx ends; it returns once the
// cache has synced.
func (st *Stats) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(st.Kube, 0, informers.WithNamespace(st.Namespace))
	lister := factory.Core().V1().Pods().Lister().Pods(st.Namespace)
	st.pods = func() ([]*corev1.Pod, error) { return lister.List(labels.Everything()) }
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
}

func (st *Stats) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	ip := ""
	if a, ok := local.(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	st.mu.Lock()
	if st.scrapes == nil {
		st.scrapes = map[string]int{}
	}
	st.scrapes[ip]++
	st.mu.Unlock()
	pods, err := st.pods()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	var pod *corev1.Pod
	ready := map[string]int{}
	for _, p := range pods {
		if p.Status.PodIP == ip {
			pod = p
		}
		if isReady(p) {
			ready[p.Labels[serving.RevisionLabelKey]]++
		}
	}
	if pod == nil {
		http.Error(w, "no pod has IP "+ip, http.StatusNotFound)
		return
	}
	rev := pod.Labels[serving.RevisionLabelKey]
	st.Sim.mu.Lock()
	l := st.Sim.load[rev]
	st.Sim.mu.Unlock()
	stat := metrics.Stat{PodName: pod.Name, Timestamp: time.Now().Unix()}
	if pod.Status.StartTime != nil {
		stat.ProcessUptime = time.Since(pod.Status.StartTime.Time).Seconds()
	}
	if n := ready[rev]; n > 0 && isReady(pod) {
		stat.RequestCount = l.rps / float64(n)
		stat.AverageConcurrentRequests = l.rps * l.latency.Seconds() / float64(n)
	}
	body, err := stat.Marshal()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", header.ProtobufMIMEType)
	_, _ = w.Write(body)
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
