package grpcadmin

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
)

func mountHealth(r *mux.Router, h *handler) {
	r.Handle(PathHealth, h.Staff(http.HandlerFunc(h.health))).Methods(http.MethodGet, http.MethodHead).Name("grpc:monitor-health")
}

// HealthResponse is the live gRPC server's state.
type HealthResponse struct {
	Status             string `json:"status"` // "healthy" or "stopped"
	ServerRunning      bool   `json:"server_running"`
	UptimeSeconds      int64  `json:"uptime_seconds"`
	RegisteredServices int    `json:"registered_services"`
}

func (h *handler) health(w http.ResponseWriter, _ *http.Request) {
	st := h.Health()
	out := HealthResponse{Status: "stopped", ServerRunning: st.Running, UptimeSeconds: int64(st.Uptime / time.Second), RegisteredServices: st.Services}
	if st.Running {
		out.Status = "healthy"
	}
	rest.JSON(w, http.StatusOK, out)
}
