package grpcadmin

import (
	"archive/zip"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/protos"
	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/deploy/errcode"
)

func mountProtoFiles(r *mux.Router, h *handler) {
	get := []string{http.MethodGet, http.MethodHead}
	r.Handle(PathProtoFiles, h.StaffOrKey(http.HandlerFunc(h.listProtos))).Methods(get...).Name("grpc:proto-files")
	// The fixed names go before {app_label}, which would take them.
	r.Handle(PathProtoZip, h.StaffOrKey(http.HandlerFunc(h.zipProtos))).Methods(get...).Name("grpc:proto-files-download-all")
	// Generating writes to the server's disk: staff only, as on gRPC.
	r.Handle(PathProtoGen, h.Staff(http.HandlerFunc(h.generateProtos))).Methods(http.MethodPost).Name("grpc:proto-files-generate")
	// .+ so that a label holding a (decoded) slash reaches the handler
	// and is refused there rather than falling through to a 404.
	r.Handle("/cfg/grpc/proto-files/{app_label:.+}/", h.StaffOrKey(http.HandlerFunc(h.getProto))).Methods(get...).Name("grpc:proto-file")
}

// ProtoList is the list of written files.
type ProtoList struct {
	Files      []protos.File `json:"files"`
	TotalFiles int           `json:"total_files"`
	// ProtoDir is a path on the server: shown to staff only, never to an
	// API key.
	ProtoDir string `json:"proto_dir,omitempty"`
}

func (h *handler) listProtos(w http.ResponseWriter, r *http.Request) {
	files, err := h.Protos.List()
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	out := ProtoList{Files: files, TotalFiles: len(files)}
	if p, ok := auth.PrincipalFrom(r.Context()); ok && p.Via != auth.ViaAPIKey {
		out.ProtoDir = h.Protos.Root()
	}
	rest.JSON(w, http.StatusOK, out)
}

func (h *handler) getProto(w http.ResponseWriter, r *http.Request) {
	_, b, err := h.Protos.Read(mux.Vars(r)["app_label"])
	switch {
	case errors.Is(err, protos.ErrBadLabel):
		rest.WriteError(w, errcode.New(errcode.InvalidAppLabel, err.Error()))
		return
	case errors.Is(err, protos.ErrUnknownLabel):
		rest.WriteError(w, errcode.New(errcode.NotFound, err.Error()))
		return
	case errors.Is(err, protos.ErrNotGenerated):
		rest.WriteError(w, errcode.New(errcode.NotGenerated, err.Error()+": POST "+PathProtoGen))
		return
	case err != nil:
		rest.Fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}

func (h *handler) zipProtos(w http.ResponseWriter, r *http.Request) {
	// Read everything first, so a failure is still a proper error answer.
	type entry struct {
		path string
		body []byte
	}
	var entries []entry
	for _, label := range h.Protos.Labels() {
		s, b, err := h.Protos.Read(label)
		if errors.Is(err, protos.ErrNotGenerated) {
			continue
		}
		if err != nil {
			rest.Fail(w, r, err)
			return
		}
		entries = append(entries, entry{s.Path, b})
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Disposition", `attachment; filename="cfgd-protos.zip"`)
	zw := zip.NewWriter(w)
	now := time.Now()
	for _, e := range entries {
		f, err := zw.CreateHeader(&zip.FileHeader{Name: e.path, Method: zip.Deflate, Modified: now})
		if err != nil {
			return // the client went away mid-body
		}
		if _, err := f.Write(e.body); err != nil {
			return
		}
	}
	_ = zw.Close()
}

// GenerateRequest is the body of POST generate/; both fields are optional.
type GenerateRequest struct {
	Apps  []string `json:"apps"`
	Force bool     `json:"force"`
}

// GenerateResponse says what was written.
type GenerateResponse struct {
	Status         string              `json:"status"` // "success", "partial" or "error"
	Generated      []string            `json:"generated"`
	GeneratedCount int                 `json:"generated_count"`
	Errors         []protos.LabelError `json:"errors"`
	ProtoDir       string              `json:"proto_dir"`
}

func (h *handler) generateProtos(w http.ResponseWriter, r *http.Request) {
	var req GenerateRequest
	// An empty body means "every app, unforced".
	if r.ContentLength != 0 && !rest.DecodeOr400(w, r, &req) {
		return
	}
	if len(req.Apps) > 100 {
		rest.WriteError(w, errcode.Fields(map[string]string{"apps": "at most 100 labels"}))
		return
	}
	res := h.Protos.Generate(req.Apps, req.Force)
	out := GenerateResponse{Status: "success", Generated: res.Generated, GeneratedCount: len(res.Generated), Errors: res.Errors, ProtoDir: h.Protos.Root()}
	switch {
	case len(res.Errors) > 0 && len(res.Generated) > 0:
		out.Status = "partial"
	case len(res.Errors) > 0:
		out.Status = "error"
	}
	rest.JSON(w, http.StatusOK, out)
}
