package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// errDigest marks go-containerregistry's own digest check failing while reading.
var errDigest = errors.New("registry blob digest check failed")

// openOCI fetches the blob of the digest from an OCI repository
// (oci://<registry>/<repository>; oci+http:// for a registry without TLS),
// through the source's transport (Store.clientFor): with the plan's credential
// for the registry when it has one, anonymously otherwise. A source that would
// carry that credential without TLS is refused before any request
// (protocol.ErrRegistryLoginInClear): the coordinator does not build such a plan,
// and an agent given one anyway must not be the one to leak the login.
func (s *Store) openOCI(ctx context.Context, u *url.URL, digest string, creds []protocol.RegistryCredential, transport http.RoundTripper) (io.ReadCloser, int64, error) {
	auth := authn.Anonymous
	if c, ok := protocol.Credential(creds, u.Host); ok {
		if host, inClear := protocol.RegistryInClear(u.String()); inClear {
			return nil, 0, fmt.Errorf("%w: the plan carries a login for registry %s, which this source reaches without TLS; the source is not tried", protocol.ErrRegistryLoginInClear, host)
		}
		auth = authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken})
	}
	var opts []name.Option
	if u.Scheme == protocol.SchemeOCIHTTP {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewDigest(u.Host+"/"+strings.TrimPrefix(u.Path, "/")+"@"+digest, opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("OCI reference: %w", err)
	}
	layer, err := remote.Layer(ref, remote.WithContext(ctx), remote.WithTransport(transport), remote.WithAuth(auth))
	if err != nil {
		return nil, 0, err
	}
	// Size asks the registry (HEAD); a registry without the blob answers here.
	size, err := layer.Size()
	if err != nil {
		return nil, 0, registryErr(err)
	}
	body, err := layer.Compressed()
	if err != nil {
		return nil, 0, registryErr(err)
	}
	return digestErrReader{body}, size, nil
}

func registryErr(err error) error { return fmt.Errorf("registry: %w", err) }

// digestErrReader marks the verifying reader's mismatch error, which it returns
// at the end of the body, as errDigest.
type digestErrReader struct{ io.ReadCloser }

func (r digestErrReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && strings.Contains(err.Error(), "error verifying") {
		err = fmt.Errorf("%w: %w", errDigest, err)
	}
	return n, err
}
