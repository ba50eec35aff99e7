package rmqs_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	rmqs "github.com/rmq-scheduler/rmq-scheduler/clients/go"
)

// A self-signed certificate for 127.0.0.1, written as PEM files.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, pool
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	svc := newService(t, "", "--tls-cert-file", cert, "--tls-key-file", key)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	svc.scheme, svc.client = "https", &http.Client{Transport: tr}
	svc.start(true)
	ctx := context.Background()

	c := newClient(t, svc.url(), rmqs.WithTransport(tr))
	m, err := c.Schedule(ctx, job("tls"))
	if err != nil {
		t.Fatal(err)
	}
	if g, err := c.Get(ctx, m.ID); err != nil || g.ID != m.ID {
		t.Fatal(g, err)
	}
	// Without the CA: a certificate error, not retried, wrapped.
	plain := newClient(t, svc.url(), rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: time.Millisecond}))
	_, err = plain.Status(ctx)
	var ue x509.UnknownAuthorityError
	if e := asErr(t, err, rmqs.CodeConnection); !errors.As(err, &ue) || plain.Retries() != 0 {
		t.Fatal(e, plain.Retries())
	}
}
