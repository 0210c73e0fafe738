package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	_ "unsafe" // go:linkname

	"github.com/sirupsen/logrus"
)

// ekuiperListener is the function eKuiper v2.4.0 calls for its REST
// server's listener (internal/server.newNetListener, which it has for
// EdgeX's OpenZiti transport). rmqflow-sql replaces it: eKuiper serves its
// REST API on a unix socket in a directory only the server's user can
// enter (innerREST), which the gate reaches, and listens on no TCP port of
// its own. A newer eKuiper without this variable fails to link; one that
// stopped calling it would open its REST port again, which
// TestRESTNeedsToken sees (no token needed there).
//
//go:linkname ekuiperListener github.com/lf-edge/ekuiper/v2/internal/server.newNetListener
var ekuiperListener func(addr string, logger *logrus.Logger) (net.Listener, error)

// innerREST is where eKuiper's own REST server listens: a unix socket
// (TCP would buffer what net.Pipe does not: eKuiper answers some requests,
// a 404 for one, without reading their body).
type innerREST struct{ socket string }

// newInnerREST makes the socket's directory, <home>/run (0700), or a
// private temporary one when that path is too long for a socket.
func newInnerREST(home string) (innerREST, error) {
	dir := filepath.Join(home, "run")
	if len(dir) > 90 {
		d, err := os.MkdirTemp("", "rmqflow-sql-")
		if err != nil {
			return innerREST{}, err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return innerREST{}, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return innerREST{}, err
	}
	return innerREST{socket: filepath.Join(dir, "rest.sock")}, nil
}

// listen is ekuiperListener's replacement.
func (i innerREST) listen(string, *logrus.Logger) (net.Listener, error) {
	if err := os.Remove(i.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", i.socket)
}

// dial connects to eKuiper's REST server (an http.Transport's DialContext).
func (i innerREST) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", i.socket)
}

// client is an HTTP client that reaches eKuiper's REST API (base URL
// internalURL), for the rocketmq source's checks.
func (i innerREST) client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: i.dial, DisableKeepAlives: true}}
}

// internalURL is the base URL of eKuiper's REST API through
// innerREST.client (any host: the socket is dialled).
const internalURL = "http://ekuiper.internal"

// notServing reports whether err is a dial before eKuiper serves its REST
// API: it starts the rules it recovers first.
func notServing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)
}

// gate is the REST API's listener: it refuses what a web page or a caller
// without the token could send, and hands the rest to eKuiper.
type gate struct {
	tokenSum [sha256.Size]byte
	proxy    *httputil.ReverseProxy
}

func newGate(token string, inner innerREST) *gate {
	target, _ := url.Parse(internalURL)
	g := &gate{tokenSum: sha256.Sum256([]byte(token))}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization")
		},
		Transport: &http.Transport{DialContext: inner.dial, DisableKeepAlives: true},
		ModifyResponse: func(r *http.Response) error {
			for k := range r.Header {
				if strings.HasPrefix(k, "Access-Control-") {
					r.Header.Del(k)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if notServing(err) {
				refuse(w, http.StatusServiceUnavailable, "eKuiper's REST server has not started yet (it starts after the rules it recovers): try again")
				return
			}
			refuse(w, http.StatusBadGateway, "eKuiper's REST server: "+err.Error())
		},
	}
	return g
}

// server is the REST API's HTTP server.
func (g *gate) server() *http.Server {
	return &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute,
		WriteTimeout: 5 * time.Minute, IdleTimeout: time.Minute}
}

// browserTypes are the content types a web page may send to another origin
// without a preflight (besides none).
var browserTypes = map[string]bool{"text/plain": true, "application/x-www-form-urlencoded": true, "multipart/form-data": true}

// hostEndpoints are eKuiper's REST endpoints that write files of the
// server's host, read files or URLs a request names, or install code;
// their writes are refused (a prefix covers the paths under it).
var hostEndpoints = []struct{ prefix, why string }{
	{"/config/uploads", "uploads write files into the server's data directory"},
	{"/ruleset/import", "imports read the files and URLs a request names"},
	{"/data/import", "imports read the files and URLs a request names"},
	{"/v2/data/import", "imports read the files and URLs a request names"},
	{"/async/data/import", "imports read the files and URLs a request names"},
	{"/plugins", "plugins are programs run on the server's host"},
	{"/services", "services install files on the server's host"},
	{"/schemas", "schemas are files written on the server's host"},
	{"/udf", "functions are code run in the server"},
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A web page's request carries Origin (any cross-origin one, and every
	// POST) or Sec-Fetch-Site; a preflight is OPTIONS. None gets a CORS
	// header, so a browser keeps even the refusal from the page.
	if r.Header.Get("Origin") != "" || r.Method == http.MethodOptions ||
		r.Header.Get("Sec-Fetch-Site") != "" && r.Header.Get("Sec-Fetch-Site") != "none" {
		refuse(w, http.StatusForbidden, "requests from web pages (Origin, preflights) are refused: rmqflow-sql's REST API is for programs that send its token")
		return
	}
	if !(r.Method == http.MethodGet && r.URL.Path == "/ping") && !g.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rmqflow-sql"`)
		refuse(w, http.StatusUnauthorized, `the REST API needs the token: send "Authorization: Bearer <token>", the token being `+
			`the content of rest.token in rmqflow-sql's home (new at each start), or RMQFLOW_SQL_TOKEN`)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	default:
		if code, why := contentRefusal(r); code != 0 {
			refuse(w, code, why)
			return
		}
		p := path.Clean("/" + r.URL.Path)
		for _, e := range hostEndpoints {
			if p == e.prefix || strings.HasPrefix(p, e.prefix+"/") {
				refuse(w, http.StatusForbidden, r.Method+" "+e.prefix+" is refused: "+e.why)
				return
			}
		}
	}
	g.proxy.ServeHTTP(w, r)
}

// authorized reports whether r carries the token.
func (g *gate) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenSum[:]) == 1
}

// contentRefusal refuses a write whose content type a web page can send
// without a preflight, or whose body is not JSON.
func contentRefusal(r *http.Request) (int, string) {
	ct := r.Header.Get("Content-Type")
	mt := ""
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return http.StatusUnsupportedMediaType, "Content-Type " + ct + ": " + err.Error()
		}
	}
	if browserTypes[mt] {
		return http.StatusUnsupportedMediaType, "Content-Type " + mt + " is refused on a write (web pages send it to any origin): send application/json"
	}
	if r.ContentLength != 0 && mt != "application/json" {
		return http.StatusUnsupportedMediaType, "a write's body must be Content-Type application/json"
	}
	return 0, ""
}

// refuse answers with eKuiper's error shape.
func refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": code, "message": "rmqflow-sql: " + msg})
}
