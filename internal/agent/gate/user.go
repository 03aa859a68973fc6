package gate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capi-inplace/capi-inplace/internal/agent/celrun"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// PodLister lists the pods bound to the agent's own Node (field selector
// spec.nodeName), for CEL gates.
type PodLister interface {
	PodsOnNode(ctx context.Context) ([]corev1.Pod, error)
}

// maxProbeBody is how much of an HTTP probe's answer is read (and discarded,
// so the connection can be reused); the status alone decides.
const maxProbeBody = 64 << 10

// userGate turns one user-defined gate of the plan into a check of its kind.
func (c *Checker) userGate(ug protocol.Gate) Gate {
	// The policy bounds the verifying deadline with the same rule
	// (protocol.GatesMax), so the agent's own verdict comes before it.
	b := ug.Bounds(protocol.GateBounds{PassWithin: c.Timeout, Run: c.CommandTimeout})
	g := Gate{Name: ug.Name, AttemptTimeout: b.Run, PassWithin: b.PassWithin}
	switch {
	case ug.HTTPGet != nil:
		g.Check = httpCheck(*ug.HTTPGet)
	case ug.CEL != nil:
		g.Check = c.celCheck(ug.CEL.Expression)
	default:
		g.Check = func(ctx context.Context) error {
			_, err := c.Runner.Run(ctx, backend.Command{Name: ug.Command[0], Args: ug.Command[1:]})
			return err
		}
	}
	return g
}

// httpCheck is an httpGet gate: one GET per poll on a fresh client (nothing is
// shared between gates or kept after the gate), bounded by the poll's context,
// with the CA bundle's roots when one is given and the host's otherwise. No
// proxy from the environment: the probe is of the node's own network. The URL
// is named without its query in errors (a query may carry a token).
func httpCheck(h protocol.HTTPGetGate) func(ctx context.Context) error {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: h.InsecureSkipVerify} // opt-in per gate, false by default
	var setupErr error
	if h.CABundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(h.CABundle)) {
			setupErr = errors.New("caBundle holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	name := h.URL
	if u, err := url.Parse(h.URL); err == nil {
		name = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	}
	lo, hi := h.StatusRange()
	return func(ctx context.Context) error {
		if setupErr != nil {
			return setupErr
		}
		tr := &http.Transport{TLSClientConfig: tlsCfg, Proxy: nil, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
		if err != nil {
			return fmt.Errorf("GET %s: %w", name, err)
		}
		req.Header.Set("User-Agent", "capi-inplace-agent/gate")
		resp, err := client.Do(req)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return fmt.Errorf("GET %s: %w", name, err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
		_ = resp.Body.Close()
		if resp.StatusCode < lo || resp.StatusCode > hi {
			return fmt.Errorf("GET %s: status %d, want %d-%d", name, resp.StatusCode, lo, hi)
		}
		return nil
	}
}

// celCheck is a CEL gate: on each poll the Node and the pods bound to it are
// read, and the CEL helper binary (celrun.Helper, Checker.CELHelper) compiles and
// evaluates the expression over them, bounded by the poll's context (a gate's
// timeout kills it). The policy compiled the expression already; a helper of
// another version may still refuse it, and says why on every poll. The agent
// itself links no cel-go (its initialisation alone costs some 3 MiB of RSS).
func (c *Checker) celCheck(expression string) func(ctx context.Context) error {
	helper := celrun.Helper{Path: c.CELHelper}
	return func(ctx context.Context) error {
		if c.Pods == nil {
			return errors.New("this agent cannot list its node's pods")
		}
		n, err := c.Nodes.Node(ctx)
		if err != nil {
			return err
		}
		pods, err := c.Pods.PodsOnNode(ctx)
		if err != nil {
			return err
		}
		node, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
		if err != nil {
			return fmt.Errorf("node as JSON: %w", err)
		}
		objs := make([]map[string]any, 0, len(pods))
		for i := range pods {
			o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pods[i])
			if err != nil {
				return fmt.Errorf("pod %s/%s as JSON: %w", pods[i].Namespace, pods[i].Name, err)
			}
			objs = append(objs, o)
		}
		err = helper.Eval(ctx, celproto.Request{Expression: expression, Node: node, Pods: objs})
		if errors.Is(err, celproto.ErrFalse) {
			return fmt.Errorf("%w over node %s and its %d pods", err, n.Name, len(objs))
		}
		return err
	}
}
