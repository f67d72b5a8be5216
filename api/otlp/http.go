package otlp

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/monitor"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
)

// Path is OTLP/HTTP's trace path on the HTTP port.
const Path = "/v1/traces"

// MaxBodyBytes bounds a body, as sent and after gzip: the JSON ingest's
// limit.
const MaxBodyBytes = monitor.MaxIngestBytes

// The body types OTLP/HTTP defines; the answer has the request's.
const (
	typeProtobuf = "application/x-protobuf"
	typeJSON     = "application/json"
)

// Mount adds POST /v1/traces.
func (r *Receiver) Mount(m *mux.Router) {
	m.Handle(Path, http.HandlerFunc(r.serveHTTP)).Methods(http.MethodPost)
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	typ, err := bodyType(req.Header.Get("Content-Type"))
	if err != nil {
		r.fail(w, req, typeProtobuf, err)
		return
	}
	// Authenticated before the body is read, so a stranger cannot make
	// cfgd inflate and decode anything.
	raw := req.Header.Get(grpcserver.HeaderAPIKey)
	if raw == "" {
		r.fail(w, req, typ, errcode.New(errcode.NotAuthenticated, "send an API key in the x-api-key header"))
		return
	}
	p, err := r.keys.APIKey(ctx, raw)
	switch {
	case errors.Is(err, grpcserver.ErrUnauthenticated):
		r.fail(w, req, typ, errcode.New(errcode.InvalidAPIKey, "API key is invalid, revoked or expired"))
		return
	case err != nil:
		r.fail(w, req, typ, errcode.Wrap(errcode.Unavailable, "authentication is unavailable, retry shortly", err))
		return
	}
	if err := allowed(p); err != nil {
		r.fail(w, req, typ, err)
		return
	}
	body := http.MaxBytesReader(w, req.Body, MaxBodyBytes)
	ereq, err := decode(typ, req.Header.Get("Content-Encoding"), body)
	if err != nil {
		r.metrics.Rejected(ingestmetrics.OTLP, ingestmetrics.Malformed, 1)
		r.fail(w, req, typ, err)
		return
	}
	res, err := r.export(ctx, p, ereq.Traces())
	if err != nil {
		r.fail(w, req, typ, err)
		return
	}
	// OTLP answers 200 for full and partial success alike.
	r.write(w, typ, http.StatusOK, res)
}

// bodyType is the OTLP body type of a Content-Type header.
func bodyType(header string) (string, error) {
	mt, _, err := mime.ParseMediaType(header)
	if err == nil && (mt == typeProtobuf || mt == typeJSON) {
		return mt, nil
	}
	return "", errcode.New(errcode.UnsupportedMediaType, "Content-Type must be application/x-protobuf or application/json")
}

// decode reads an ExportTraceServiceRequest of type typ (bodyType's) from
// body, inflating it when encoding is gzip; more than MaxBodyBytes, as
// sent or inflated, is too large. Every failure is an *errcode.Error.
func decode(typ, encoding string, body io.Reader) (ptraceotlp.ExportRequest, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return ptraceotlp.ExportRequest{}, readErr(err, "the body is not gzip")
		}
		defer zr.Close()
		body = zr
	default:
		return ptraceotlp.ExportRequest{}, errcode.New(errcode.UnsupportedMediaType, "Content-Encoding must be gzip or none")
	}
	data, err := io.ReadAll(io.LimitReader(body, MaxBodyBytes+1))
	if err != nil {
		return ptraceotlp.ExportRequest{}, readErr(err, "the body is not valid gzip")
	}
	if len(data) > MaxBodyBytes {
		return ptraceotlp.ExportRequest{}, errcode.New(errcode.TooLarge, fmt.Sprintf("the body is larger than %d bytes once inflated", MaxBodyBytes))
	}
	return unmarshal(typ, data)
}

// unmarshal decodes an ExportTraceServiceRequest of type typ once the
// body is within the bounds (bounds.go), so decoding allocates in
// proportion to them; both transports decode here. Every failure is an
// *errcode.Error.
func unmarshal(typ string, data []byte) (ptraceotlp.ExportRequest, error) {
	bounds := boundsProto
	if typ == typeJSON {
		bounds = boundsJSON
	}
	if err := bounds(data); err != nil {
		return ptraceotlp.ExportRequest{}, err
	}
	req := ptraceotlp.NewExportRequest()
	var err error
	if typ == typeJSON {
		err = req.UnmarshalJSON(data)
	} else {
		err = req.UnmarshalProto(data)
	}
	if err != nil {
		return ptraceotlp.ExportRequest{}, errcode.New(errcode.BadRequest, "the body is not an OTLP ExportTraceServiceRequest ("+typ+")")
	}
	return req, nil
}

// readErr classifies a failed read: past the limit it is too large, else
// the body is bad (not gzip, corrupt, cut short).
func readErr(err error, bad string) error {
	var big *http.MaxBytesError
	if errors.As(err, &big) {
		return errcode.New(errcode.TooLarge, fmt.Sprintf("the body is larger than %d bytes", big.Limit))
	}
	return errcode.Wrap(errcode.BadRequest, bad, err)
}

// fail answers err as OTLP/HTTP says: errcode's HTTP status (503 and 429
// are the ones clients retry, with Retry-After) and a google.rpc.Status
// body of the request's type, the same status the gRPC side gives. It
// logs as every REST endpoint does (rest.Classify).
func (r *Receiver) fail(w http.ResponseWriter, req *http.Request, typ string, err error) {
	e := rest.Classify(req, err)
	rest.SetRetryAfter(w, e)
	r.write(w, typ, e.Code.HTTPStatus(), rpcStatus{grpcserver.StatusOf(e).Proto()})
}

// message is what write marshals: ptraceotlp's types, or rpcStatus.
type message interface {
	MarshalProto() ([]byte, error)
	MarshalJSON() ([]byte, error)
}

type rpcStatus struct{ m proto.Message }

func (s rpcStatus) MarshalProto() ([]byte, error) { return proto.Marshal(s.m) }
func (s rpcStatus) MarshalJSON() ([]byte, error)  { return protojson.Marshal(s.m) }

func (r *Receiver) write(w http.ResponseWriter, typ string, status int, m message) {
	var (
		b   []byte
		err error
	)
	if typ == typeJSON {
		b, err = m.MarshalJSON()
	} else {
		b, err = m.MarshalProto()
	}
	if err != nil {
		// Marshalling what was built here cannot fail; were it to, the
		// status alone still tells the client what happened.
		r.log.Error("otlp answer not marshalled", "err", err)
		b = nil
	}
	w.Header().Set("Content-Type", typ)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
