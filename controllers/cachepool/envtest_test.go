package cachepool

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

const (
	operatorNS = "rackcache-system"
	cephNS     = "ceph"
	// cephKey is the cephx key of the test's Ceph user; it must never
	// show in a status or an Event.
	cephKey = "AQBtestkeyNeverShownAnywhere0000000000=="
	// wait bounds every Eventually: liveness, not timing.
	wait = 60 * time.Second
)

// env is the envtest apiserver with the reconciler running in a manager.
type env struct {
	ctx context.Context
	c   client.Client // uncached, for the test's own reads and writes
	r   *Reconciler
	cfg *rest.Config
}

func startEnv(t *testing.T) *env {
	t.Helper()
	if testing.Verbose() {
		// The reconciler's logs, for a failing run (go test -v).
		ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{}))
	}
	_, cfg := framework.StartEnvtest(t, filepath.Join(framework.RepoRoot(), "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	tokens := &servers.Tokens{Client: mgr.GetClient(), Namespace: operatorNS, ServiceAccount: servers.OperatorServiceAccount}
	r := &Reconciler{
		Client:    mgr.GetClient(),
		Namespace: operatorNS,
		// Port: the test's dataplane listens on a free loopback port.
		Connector:      &servers.Connector{Reader: mgr.GetClient(), Tokens: tokens, Namespace: operatorNS, Timeout: 5 * time.Second, Port: framework.FreeLoopbackPort(t)},
		ServerAccess:   ServerAccess{Caller: tokens.Caller()},
		Recorder:       mgr.GetEventRecorderFor("cachepool-controller"),
		StatusInterval: 2 * time.Second,
		// The default device prefixes, and the test's own directories for
		// the pools whose devices are files.
		Admission: &Admission{
			DevicePrefixes: append(DefaultAdmission().DevicePrefixes, os.TempDir()+"/"),
			ImagePrefixes:  DefaultAdmission().ImagePrefixes,
		},
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatalf("set up the reconciler: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	for _, ns := range []string{operatorNS, cephNS} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	user := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ceph-user", Namespace: cephNS},
		Data:       map[string][]byte{"userID": []byte("rackcache"), "userKey": []byte(cephKey)},
	}
	if err := c.Create(ctx, user); err != nil {
		t.Fatalf("create the Ceph user Secret: %v", err)
	}
	if err := framework.CreateServiceAccounts(ctx, c, operatorNS); err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, c: c, r: r, cfg: cfg}
}

// createPool creates an explicit-monitor pool (testPool) and returns it.
func (e *env) createPool(t *testing.T, name string) *rcv1.CachePool {
	t.Helper()
	p := testPool(name)
	p.UID, p.Generation = "", 0
	if err := e.c.Create(e.ctx, p); err != nil {
		t.Fatalf("create CachePool %s: %v", name, err)
	}
	return p
}

// ownedObjects reads the objects made for pool; an error while any is missing.
func (e *env) ownedObjects(pool string) (map[string]client.Object, error) {
	objs := map[string]client.Object{
		"daemonset": &appsv1.DaemonSet{}, "configmap": &corev1.ConfigMap{},
		"ca": &corev1.Secret{}, "tls": &corev1.Secret{}, "ceph": &corev1.Secret{},
	}
	names := map[string]string{
		"daemonset": servers.DaemonSetName(pool), "configmap": servers.ConfigMapName(pool),
		"ca": servers.CASecretName(pool), "tls": servers.TLSSecretName(pool),
		"ceph": servers.CephKeyringSecretName(pool),
	}
	for k, o := range objs {
		if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: operatorNS, Name: names[k]}, o); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

func (e *env) pool(g Gomega, name string) *rcv1.CachePool {
	var p rcv1.CachePool
	g.Expect(e.c.Get(e.ctx, client.ObjectKey{Name: name}, &p)).To(Succeed())
	return &p
}

func (e *env) events(g Gomega, pool, reason string) []corev1.Event {
	var list corev1.EventList
	g.Expect(e.c.List(e.ctx, &list)).To(Succeed())
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "CachePool" && ev.InvolvedObject.Name == pool && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func secretData(o client.Object, key string) []byte { return o.(*corev1.Secret).Data[key] }

// tokenReview asks the apiserver about token for audience, as a server
// does; the username it vouches for, "" when it does not.
func tokenReview(g Gomega, e *env, token, audience string) string {
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}
	g.Expect(e.c.Create(e.ctx, review)).To(Succeed())
	if !review.Status.Authenticated {
		return ""
	}
	return review.Status.User.Username
}

func TestCachePoolEnvtest(t *testing.T) {
	e := startEnv(t)

	t.Run("creates the DaemonSet, ConfigMap and credentials, owned by the pool", func(t *testing.T) {
		g := NewWithT(t)
		pool := e.createPool(t, "alpha")
		var objs map[string]client.Object
		g.Eventually(func() error {
			var err error
			objs, err = e.ownedObjects("alpha")
			return err
		}).WithTimeout(wait).Should(Succeed())
		for kind, o := range objs {
			refs := o.GetOwnerReferences()
			g.Expect(refs).To(HaveLen(1), kind)
			g.Expect(refs[0].UID).To(Equal(pool.UID), kind)
			g.Expect(*refs[0].Controller).To(BeTrue(), kind)
			g.Expect(o.GetLabels()).To(Equal(servers.Labels("alpha")), kind)
		}
		g.Expect(e.pool(g, "alpha").Finalizers).To(ContainElement(rcv1.CachePoolFinalizer))
		g.Expect(objs["configmap"].(*corev1.ConfigMap).Data[ConfigKey]).To(ContainSubstring(`"filename": "/dev/nvme1n1"`))
		// One scrape token for all pools, owned by none of them.
		var scrape corev1.Secret
		g.Expect(e.c.Get(e.ctx, client.ObjectKey{Namespace: operatorNS, Name: servers.MetricsTokenSecretName}, &scrape)).To(Succeed())
		g.Expect(len(scrape.Data[servers.TokenKey])).To(BeNumerically(">=", 43))
		g.Expect(scrape.OwnerReferences).To(BeEmpty())
		// The data-path user's key, in the keyring the servers mount.
		g.Expect(string(secretData(objs["ceph"], servers.CephKeyringKey))).To(Equal("[client.rackcache]\n\tkey = " + cephKey + "\n"))

		// No dataplane pod exists (envtest runs no kubelet): NoServers, not
		// a Ceph problem, at the pool's generation.
		g.Eventually(func(g Gomega) {
			p := e.pool(g, "alpha")
			c := meta.FindStatusCondition(p.Status.Conditions, rcv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(rcv1.ReasonNoServers))
			g.Expect(c.ObservedGeneration).To(Equal(p.Generation))
			g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		}).WithTimeout(wait).Should(Succeed())
	})

	t.Run("a second pass changes nothing", func(t *testing.T) {
		g := NewWithT(t)
		before, err := e.ownedObjects("alpha")
		g.Expect(err).NotTo(HaveOccurred())
		for range 2 {
			_, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "alpha"}})
			g.Expect(err).NotTo(HaveOccurred())
		}
		after, err := e.ownedObjects("alpha")
		g.Expect(err).NotTo(HaveOccurred())
		for kind := range before {
			g.Expect(after[kind].GetResourceVersion()).To(Equal(before[kind].GetResourceVersion()), kind)
		}
	})

	t.Run("the server certificate verifies against the pool's CA", func(t *testing.T) {
		g := NewWithT(t)
		objs, err := e.ownedObjects("alpha")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(secretData(objs["tls"], servers.CACertKey)).To(Equal(secretData(objs["ca"], servers.CACertKey)))
		verifyServerCert(g, objs, "alpha", time.Now())
		_, err = e.r.Connector.Client(e.ctx, "alpha", "node-x", "127.0.0.1")
		g.Expect(err).NotTo(HaveOccurred(), "the operator's connector reads the pool's credentials")
	})

	t.Run("the operator's tokens name one server each, and only the apiserver's review counts", func(t *testing.T) {
		g := NewWithT(t)
		tokens := e.r.Connector.Tokens
		audX, audY := servers.RPCAudience(operatorNS, "alpha", "node-x"), servers.RPCAudience(operatorNS, "alpha", "node-y")
		x, err := tokens.Token(e.ctx, audX)
		g.Expect(err).NotTo(HaveOccurred())
		again, err := tokens.Token(e.ctx, audX)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again).To(Equal(x), "a token is reused until half its life")
		y, err := tokens.Token(e.ctx, audY)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(y).NotTo(Equal(x))
		// What a server on node-x asks the apiserver: x passes as the
		// operator, y (node-y's) does not.
		g.Expect(tokenReview(g, e, x, audX)).To(Equal(tokens.Caller()))
		g.Expect(tokenReview(g, e, y, audX)).To(BeEmpty())
	})

	t.Run("the former shared RPC token is deleted", func(t *testing.T) {
		g := NewWithT(t)
		legacy := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: servers.LegacyTokenSecretName("alpha"), Namespace: operatorNS},
			Data:       map[string][]byte{servers.TokenKey: []byte("an-old-shared-token-0123456789")},
		}
		g.Expect(e.c.Create(e.ctx, legacy)).To(Succeed())
		_, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "alpha"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.c.Get(e.ctx, client.ObjectKeyFromObject(legacy), &corev1.Secret{}))
		}).WithTimeout(wait).Should(BeTrue())
	})

	t.Run("the token and CA stay across a spec change", func(t *testing.T) {
		g := NewWithT(t)
		before, err := e.ownedObjects("alpha")
		g.Expect(err).NotTo(HaveOccurred())
		p := e.pool(g, "alpha")
		p.Spec.Devices = append(p.Spec.Devices, rcv1.CacheDevice{Path: "/dev/nvme3n1"})
		g.Expect(e.c.Update(e.ctx, p)).To(Succeed())
		g.Eventually(func(g Gomega) {
			after, err := e.ownedObjects("alpha")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after["configmap"].(*corev1.ConfigMap).Data[ConfigKey]).To(ContainSubstring(`"name": "cache2"`))
			tmpl := after["daemonset"].(*appsv1.DaemonSet).Spec.Template
			g.Expect(tmpl.Annotations[ConfigHashAnnotation]).NotTo(Equal(before["daemonset"].(*appsv1.DaemonSet).Spec.Template.Annotations[ConfigHashAnnotation]))
			g.Expect(tmpl.Spec.Volumes).To(ContainElement(HaveField("Name", deviceVolumeName(2))))
			g.Expect(e.pool(g, "alpha").Status.ObservedGeneration).To(Equal(p.Generation))
			for _, k := range []string{"ca", "tls"} {
				g.Expect(after[k].GetResourceVersion()).To(Equal(before[k].GetResourceVersion()), k)
			}
			g.Expect(secretData(after["ca"], servers.CAKeyKey)).To(Equal(secretData(before["ca"], servers.CAKeyKey)))
		}).WithTimeout(wait).Should(Succeed())
	})

	t.Run("a certificate near expiry is renewed under the same CA", func(t *testing.T) {
		g := NewWithT(t)
		before, err := e.ownedObjects("alpha")
		g.Expect(err).NotTo(HaveOccurred())
		later := time.Now().Add(61 * 24 * time.Hour)
		future := &Reconciler{Client: e.r.Client, Namespace: operatorNS, Connector: e.r.Connector, Recorder: e.r.Recorder,
			Now: func() time.Time { return later }}
		g.Eventually(func(g Gomega) {
			_, err := future.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "alpha"}})
			g.Expect(err).NotTo(HaveOccurred())
			after, err := e.ownedObjects("alpha")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(secretData(after["tls"], servers.TLSCertKey)).NotTo(Equal(secretData(before["tls"], servers.TLSCertKey)))
			g.Expect(secretData(after["ca"], servers.CACertKey)).To(Equal(secretData(before["ca"], servers.CACertKey)))
			verifyServerCert(g, after, "alpha", later)
		}).WithTimeout(wait).Should(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.events(g, "alpha", EventCertificateRenewed)).NotTo(BeEmpty())
		}).WithTimeout(wait).Should(Succeed())
	})

	t.Run("Ready is False with CephUnavailable when the Rook ConfigMap is missing", func(t *testing.T) {
		g := NewWithT(t)
		p := testPool("rooky")
		p.UID, p.Generation = "", 0
		p.Spec.Ceph = rcv1.CephBackend{Rook: &rcv1.RookBackend{Namespace: "rook-ceph"}}
		g.Expect(e.c.Create(e.ctx, p)).To(Succeed())
		g.Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(e.pool(g, "rooky").Status.Conditions, rcv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(rcv1.ReasonCephUnavailable))
			g.Expect(c.Message).To(ContainSubstring("rook-ceph/rook-ceph-mon-endpoints"))
		}).WithTimeout(wait).Should(Succeed())
		// The servers are still run: they need Ceph only for volumes. No
		// keyring is copied for them until the backend resolves.
		g.Expect(e.c.Get(e.ctx, client.ObjectKey{Namespace: operatorNS, Name: servers.DaemonSetName("rooky")}, &appsv1.DaemonSet{})).To(Succeed())
		err := e.c.Get(e.ctx, client.ObjectKey{Namespace: operatorNS, Name: servers.CephKeyringSecretName("rooky")}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the keyring Secret of an unresolved backend: %v", err)
	})

	t.Run("a pool naming a device or image outside the allow-lists is not applied", func(t *testing.T) {
		g := NewWithT(t)
		p := testPool("outside")
		p.UID, p.Generation = "", 0
		p.Spec.Devices = []rcv1.CacheDevice{{Path: "/etc/kubernetes"}}
		p.Spec.Image = "registry.example/anything:latest"
		g.Expect(e.c.Create(e.ctx, p)).To(Succeed())
		g.Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(e.pool(g, "outside").Status.Conditions, rcv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(rcv1.ReasonNotAllowed))
			g.Expect(c.Message).To(And(ContainSubstring("/etc/kubernetes"), ContainSubstring("registry.example/anything:latest")))
		}).WithTimeout(wait).Should(Succeed())
		ds := &appsv1.DaemonSet{}
		err := e.c.Get(e.ctx, client.ObjectKey{Namespace: operatorNS, Name: servers.DaemonSetName("outside")}, ds)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a DaemonSet for a refused pool: %v", err)

		// An admitted pool changed to a refused image keeps running what
		// was admitted.
		g.Eventually(func() error { _, err := e.ownedObjects("alpha"); return err }).WithTimeout(wait).Should(Succeed())
		alpha := e.pool(g, "alpha")
		patch := client.MergeFrom(alpha.DeepCopy())
		alpha.Spec.Image = "registry.example/anything:latest"
		g.Expect(e.c.Patch(e.ctx, alpha, patch)).To(Succeed())
		g.Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(e.pool(g, "alpha").Status.Conditions, rcv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(rcv1.ReasonNotAllowed))
		}).WithTimeout(wait).Should(Succeed())
		g.Expect(e.c.Get(e.ctx, client.ObjectKey{Namespace: operatorNS, Name: servers.DaemonSetName("alpha")}, ds)).To(Succeed())
		g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal(testPool("alpha").Spec.Image))
		alpha = e.pool(g, "alpha")
		patch = client.MergeFrom(alpha.DeepCopy())
		alpha.Spec.Image = testPool("alpha").Spec.Image
		g.Expect(e.c.Patch(e.ctx, alpha, patch)).To(Succeed())
	})

	t.Run("deletion waits for the pool's CachedVolumes", func(t *testing.T) {
		g := NewWithT(t)
		e.createPool(t, "beta")
		g.Eventually(func(g Gomega) {
			g.Expect(e.pool(g, "beta").Finalizers).To(ContainElement(rcv1.CachePoolFinalizer))
			g.Expect(gaugeSeries("rackcache_pool_servers", "beta")).To(Equal(1))
		}).WithTimeout(wait).Should(Succeed())
		vol := &rcv1.CachedVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "vol-beta"},
			Spec:       rcv1.CachedVolumeSpec{PoolName: "beta", RBD: rcv1.RBDImage{Pool: "rbd", Image: "img"}, Size: resource.MustParse("1Gi")},
		}
		g.Expect(e.c.Create(e.ctx, vol)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.pool(g, "beta").Status.Volumes).To(Equal(int32(1)))
		}).WithTimeout(wait).Should(Succeed())

		g.Expect(e.c.Delete(e.ctx, testPoolRef("beta"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			p := e.pool(g, "beta")
			g.Expect(p.DeletionTimestamp).NotTo(BeNil())
			c := meta.FindStatusCondition(p.Status.Conditions, rcv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(rcv1.ReasonDeleting))
			g.Expect(c.Message).To(ContainSubstring("1 CachedVolume"))
			g.Expect(e.events(g, "beta", EventDeletionBlocked)).NotTo(BeEmpty())
		}).WithTimeout(wait).Should(Succeed())
		// Still there after the blocked pass: the finalizer holds it.
		g.Expect(e.pool(g, "beta").Finalizers).To(ContainElement(rcv1.CachePoolFinalizer))

		g.Expect(e.c.Delete(e.ctx, vol)).To(Succeed())
		g.Eventually(func() bool {
			err := e.c.Get(e.ctx, client.ObjectKey{Name: "beta"}, &rcv1.CachePool{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(wait).Should(BeTrue())
		g.Eventually(func() int { return gaugeSeries("rackcache_pool_servers", "beta") }).WithTimeout(wait).Should(BeZero())
	})

	t.Run("a server's state is read over TLS with the pool's credentials", func(t *testing.T) {
		serverReadOverTLS(t, e)
	})

	t.Run("no status or Event shows the Ceph key", func(t *testing.T) {
		g := NewWithT(t)
		var pools rcv1.CachePoolList
		g.Expect(e.c.List(e.ctx, &pools)).To(Succeed())
		var events corev1.EventList
		g.Expect(e.c.List(e.ctx, &events)).To(Succeed())
		for _, o := range []any{pools, events} {
			raw, err := json.Marshal(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(bytes.Contains(raw, []byte(cephKey))).To(BeFalse())
		}
	})
}

func testPoolRef(name string) *rcv1.CachePool {
	return &rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// verifyServerCert checks the TLS Secret's certificate chains to the CA
// Secret's certificate for the pool's TLS server name at now, and that its
// key matches.
func verifyServerCert(g Gomega, objs map[string]client.Object, pool string, now time.Time) {
	roots := x509.NewCertPool() // the pool's CA only
	g.Expect(roots.AppendCertsFromPEM(secretData(objs["ca"], servers.CACertKey))).To(BeTrue())
	pair, err := parseKeyPair(secretData(objs["tls"], servers.TLSCertKey), secretData(objs["tls"], servers.TLSKeyKey))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = pair.Cert.Verify(x509.VerifyOptions{DNSName: servers.TLSServerName(pool), Roots: roots, CurrentTime: now})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = pair.Cert.Verify(x509.VerifyOptions{DNSName: "other.dataplane.rackcache.io", Roots: roots, CurrentTime: now})
	var hostErr x509.HostnameError
	g.Expect(errors.As(err, &hostErr)).To(BeTrue(), "the certificate must not be valid for another pool's name")
}

// gaugeSeries counts the series of metric name with label pool=pool in
// controller-runtime's registry.
func gaugeSeries(name, pool string) int {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return -1
	}
	n := 0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					n++
				}
			}
		}
	}
	return n
}
