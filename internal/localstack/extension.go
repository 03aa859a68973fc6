package localstack

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/freeport"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ExtensionSpec describes a runtime extension process and its registration.
type ExtensionSpec struct {
	// Name is the process name and the ExtensionConfig name; CAPI names handlers
	// "<handler>.<Name>".
	Name string
	// Path is the binary.
	Path string
	// Args returns the command line for a given HTTPS port, cert dir (tls.crt,
	// tls.key, ca.crt) and management kubeconfig.
	Args func(port int, certDir, kubeconfig string) []string
	// NamespaceLabels select the namespaces this extension serves
	// (ExtensionConfig namespaceSelector matchLabels).
	NamespaceLabels map[string]string
	// Settings go into ExtensionConfig spec.settings.
	Settings map[string]string
}

// Extension is a running runtime extension registered with CAPI.
type Extension struct {
	Spec ExtensionSpec
	Port int
	Cert servingCert

	stack *Stack
	mu    sync.Mutex
	proc  *Process
}

// OurExtension returns the spec for bin/capi-inplace extension, serving namespaces
// labelled with labels and registered as the ExtensionConfig name, which it reads
// its settings from (--extension-config-name, as config/manager sets it). The
// agents are run by the stack, so the extension does not install them
// (--manage-agents=false).
func OurExtension(binDir, name string, labels, settings map[string]string) ExtensionSpec {
	return OurExtensionWith(binDir, name, labels, settings, "--manage-agents=false")
}

// OurExtensionWith is OurExtension with args of the caller's instead of
// --manage-agents=false: an extension that installs the agents itself passes its
// policy and agent image.
func OurExtensionWith(binDir, name string, labels, settings map[string]string, args ...string) ExtensionSpec {
	return ExtensionSpec{
		Name: name,
		Path: filepath.Join(binDir, "capi-inplace"),
		Args: func(port int, certDir, kubeconfig string) []string {
			return append([]string{
				"extension",
				fmt.Sprintf("--webhook-port=%d", port),
				"--webhook-host=127.0.0.1",
				"--webhook-cert-dir=" + certDir,
				"--kubeconfig=" + kubeconfig,
				"--extension-config-name=" + name,
				"--health-addr=127.0.0.1:0",
				"--diagnostics-address=0",
				"--v=1",
			}, args...)
		},
		NamespaceLabels: labels,
		Settings:        settings,
	}
}

// UpstreamTestExtension returns the spec for upstream's fake test extension
// (bin/capi-test-extension): topology patches, lifecycle hooks and the fake in-place
// hooks that wait 15-20 s per machine. It is the baseline we measure against.
func UpstreamTestExtension(binDir, name string, labels map[string]string) ExtensionSpec {
	return ExtensionSpec{
		Name: name,
		Path: filepath.Join(binDir, "capi-test-extension"),
		Args: func(port int, certDir, _ string) []string {
			return []string{
				"--leader-elect=false",
				fmt.Sprintf("--webhook-port=%d", port),
				"--webhook-cert-dir=" + certDir,
				"--health-addr=127.0.0.1:0",
				"--diagnostics-address=127.0.0.1:0", "--insecure-diagnostics",
			}
		},
		NamespaceLabels: labels,
		// The lifecycle handlers refuse to answer without it.
		Settings: map[string]string{"extensionConfigName": name},
	}
}

// StartExtension starts the extension over HTTPS with a fresh certificate, registers
// it with an ExtensionConfig and waits until CAPI has discovered its handlers.
func (s *Stack) StartExtension(ctx context.Context, spec ExtensionSpec) (*Extension, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	cert, err := newServingCert(filepath.Join(s.TempRoot, "extensions", spec.Name))
	if err != nil {
		return nil, fmt.Errorf("certificate for extension %s: %w", spec.Name, err)
	}
	e := &Extension{Spec: spec, Port: port, Cert: cert, stack: s}
	if err := e.Start(ctx); err != nil {
		return nil, err
	}
	if err := s.registerExtension(ctx, e); err != nil {
		return nil, err
	}
	return e, nil
}

// Start (re)starts the extension process on its port and waits until it serves TLS.
func (e *Extension) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.stack.StartProcess(ProcessSpec{
		Name: "extension-" + e.Spec.Name,
		Path: e.Spec.Path,
		Args: e.Spec.Args(e.Port, e.Cert.Dir, e.stack.KubeconfigPath),
		Env:  []string{"KUBECONFIG=" + e.stack.KubeconfigPath},
	})
	if err != nil {
		return err
	}
	e.proc = p
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr := fmt.Sprintf("127.0.0.1:%d", e.Port)
	return p.WaitReady(wctx, "serving HTTPS on "+addr, func(context.Context) error { return tlsDial(addr) })
}

// Kill crashes the extension process (SIGKILL).
func (e *Extension) Kill() {
	e.mu.Lock()
	p := e.proc
	e.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Process returns the current process.
func (e *Extension) Process() *Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc
}

func (s *Stack) registerExtension(ctx context.Context, e *Extension) error {
	return s.RegisterExtension(ctx, e, e.Spec.Name, e.Spec.NamespaceLabels, e.Spec.Settings)
}

// RegisterExtension registers a running extension once more under another
// ExtensionConfig name, for other namespaces and with other settings (for example
// disableInPlaceUpdates), and waits until CAPI has discovered it. One process can so
// serve several namespace groups with different settings.
func (s *Stack) RegisterExtension(ctx context.Context, e *Extension, name string, labels, settings map[string]string) error {
	return s.registerURL(ctx, fmt.Sprintf("https://127.0.0.1:%d/", e.Port), e.Cert.CAPEM, name, labels, settings)
}

// registerURL creates the ExtensionConfig name for an extension at url (serving a
// certificate of caPEM) and waits until CAPI has discovered it.
func (s *Stack) registerURL(ctx context.Context, url string, caPEM []byte, name string, labels, settings map[string]string) error {
	ec := &runtimev1.ExtensionConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: runtimev1.ExtensionConfigSpec{
			ClientConfig: runtimev1.ClientConfig{URL: url, CABundle: caPEM},
			Settings:     settings,
		},
	}
	if labels != nil {
		ec.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: labels}
	}
	if err := s.Client.Create(ctx, ec); err != nil {
		return fmt.Errorf("create ExtensionConfig %s: %w", name, err)
	}
	return s.WaitExtensionDiscovered(ctx, name)
}

// WaitExtensionDiscovered waits until the ExtensionConfig's Discovered condition is
// True and it lists handlers.
func (s *Stack) WaitExtensionDiscovered(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last string
	for {
		ec := &runtimev1.ExtensionConfig{}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, ec); err != nil && !apierrors.IsNotFound(err) {
			last = err.Error()
		} else {
			for _, c := range ec.Status.Conditions {
				if c.Type == runtimev1.ExtensionConfigDiscoveredCondition {
					last = fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
					if c.Status == metav1.ConditionTrue && len(ec.Status.Handlers) > 0 {
						s.logf("extension %s discovered with %d handlers", name, len(ec.Status.Handlers))
						return nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ExtensionConfig %s not discovered (%s): %w", name, last, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// SetExtensionSettings replaces spec.settings of an ExtensionConfig.
func (s *Stack) SetExtensionSettings(ctx context.Context, name string, settings map[string]string) error {
	ec := &runtimev1.ExtensionConfig{}
	if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, ec); err != nil {
		return fmt.Errorf("get ExtensionConfig %s: %w", name, err)
	}
	base := ec.DeepCopy()
	ec.Spec.Settings = settings
	if err := s.Client.Patch(ctx, ec, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("patch ExtensionConfig %s settings: %w", name, err)
	}
	return nil
}
