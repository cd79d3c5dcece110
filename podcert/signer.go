package podcert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Signer issues the PodCertificateRequests of one signer name with the CA of a Secret.
type Signer struct {
	Client kubernetes.Interface
	// Name is the signer name it answers (evalsi.WorkloadSigner).
	Name string
	// CA is the Secret of its CA, made by Run when it does not exist, read at each request.
	CA     CASecret
	Policy Policy
	// Secrets are the certificates it keeps in Secrets, checked every resync.
	Secrets []SecretCertificate
	Log     *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	requests certlisters.PodCertificateRequestLister
	queue    workqueue.TypedRateLimitingInterface[string]
	// signing is set once Run's workers take requests.
	signing atomic.Bool
}

// Ready says whether the signer can sign now (its readiness probe): its workers take requests,
// and its CA reads from its Secret. Otherwise it says why: kubelets' requests for new pods wait
// meanwhile, and a CA that no longer reads (its Secret deleted or broken) needs a person, since
// the signer never makes a second CA behind the back of those who trust the first.
func (s *Signer) Ready(ctx context.Context) error {
	if !s.signing.Load() {
		return errors.New("not signing yet: waiting for the PodCertificateRequests to be listed")
	}
	if _, err := s.CA.Read(ctx); err != nil {
		return fmt.Errorf("the CA cannot be read: %w", err)
	}
	return nil
}

// Run issues requests until ctx ends, with workers in parallel, and every resync keeps the CA's
// ClusterTrustBundle published (PublishTrustBundle) and the Secrets' certificates current.
func (s *Signer) Run(ctx context.Context, workers int, resync time.Duration) error {
	if s.Now == nil {
		s.Now = time.Now
	}
	if err := s.CA.Ensure(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(s.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", s.Name).String()
	}))
	informer := factory.Certificates().V1().PodCertificateRequests()
	s.requests = informer.Lister()
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "podcertificaterequests"})
	defer s.queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return nil // ctx ended
	}
	for range workers {
		go func() {
			for s.next(ctx) {
			}
		}()
	}
	s.signing.Store(true)
	defer s.signing.Store(false)
	for {
		if err := PublishTrustBundle(ctx, s.Client, s.Name, s.CA); err != nil {
			s.Log.Error("publishing the CA bundle", "signer", s.Name, "err", err)
		}
		s.keepSecrets(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(resync):
		}
	}
}

// next handles one queued request: Done always, Forget once handled, a rate-limited retry when
// the API server refused the status write or the CA could not be read (both pass).
func (s *Signer) next(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(key)
	err := func() (err error) {
		defer utilruntime.HandleCrashWithContext(ctx)
		return s.sync(ctx, key)
	}()
	if err != nil {
		s.Log.Error("issuing a pod certificate", "request", key, "err", err)
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

// sync issues the request key names, unless it is gone or already decided.
func (s *Signer) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	req, err := s.requests.PodCertificateRequests(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if decided(req) {
		return nil
	}
	ca, err := s.CA.Read(ctx)
	if err != nil {
		return err
	}
	req = req.DeepCopy()
	issued, err := Issue(req, ca, s.Policy, s.Now())
	cond := metav1.Condition{Type: certv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue, Reason: "Issued",
		Message: "issued by " + s.Name + " for " + req.Namespace + "/" + req.Spec.ServiceAccountName}
	if err != nil {
		cond = metav1.Condition{Type: certv1.PodCertificateRequestConditionTypeFailed, Status: metav1.ConditionTrue, Reason: "CannotIssue", Message: err.Error()}
	} else {
		req.Status.CertificateChain = issued.Chain
		req.Status.NotBefore = &metav1.Time{Time: issued.NotBefore}
		req.Status.NotAfter = &metav1.Time{Time: issued.NotAfter}
		req.Status.BeginRefreshAt = &metav1.Time{Time: issued.RefreshAt}
	}
	cond.LastTransitionTime = metav1.NewTime(s.Now())
	meta.SetStatusCondition(&req.Status.Conditions, cond)
	if _, err := s.Client.CertificatesV1().PodCertificateRequests(ns).UpdateStatus(ctx, req, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the certificate of %s: %w", key, err)
	}
	s.Log.Info("pod certificate", "request", key, "pod", req.Spec.PodName, "serviceAccount", req.Spec.ServiceAccountName, "condition", cond.Type, "message", cond.Message)
	return nil
}

// decided reports whether a request was issued, denied or failed: each is final.
func decided(req *certv1.PodCertificateRequest) bool {
	for _, t := range []string{certv1.PodCertificateRequestConditionTypeIssued, certv1.PodCertificateRequestConditionTypeDenied, certv1.PodCertificateRequestConditionTypeFailed} {
		if meta.IsStatusConditionTrue(req.Status.Conditions, t) {
			return true
		}
	}
	return false
}

// keepSecrets keeps each Secret's certificate current; a failure is logged and tried again at
// the next resync.
func (s *Signer) keepSecrets(ctx context.Context) {
	if len(s.Secrets) == 0 {
		return
	}
	ca, err := s.CA.Read(ctx)
	if err != nil {
		s.Log.Error("reading the CA for the Secrets' certificates", "err", err)
		return
	}
	for _, sc := range s.Secrets {
		if err := sc.keep(ctx, s.Client, ca, s.Policy, s.Now()); err != nil {
			s.Log.Error("keeping a Secret's certificate", "secret", sc.Namespace+"/"+sc.Secret, "err", err)
		}
	}
}
