// Package fleet is the pure core of capi-inplace's fleet controls: the failure
// budget's accounting (budget.go), maintenance-window arithmetic with time zones
// and DST (window.go; the cron form in cron.go), the soak between nodes, the
// record the coordinator keeps on each Cluster so that every extension replica
// and restart decides alike (state.go), and Gate, which combines them into
// "start this node now, or hold it before cordon, and why".
//
// Nothing here does I/O or reads a clock: callers pass the time and the state
// they read from the API (internal/coordinator's fleet.go is the shell).
//
// Imports: the standard library only (time/tzdata embeds the zone database so
// that windows resolve their time zones on images without /usr/share/zoneinfo).
package fleet
