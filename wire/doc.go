// Package wire holds what crosses cairn's HTTP API: service definitions
// and the file format they are written in, registrations, instances and
// their verdicts, self-reports, probe and outcome reports, members, audit
// events, the views the API answers with, and its error body — with the
// rules that make a value valid (Service.Validate, Registration.Normalize,
// Report.Validate, OutcomeReport.Validate) and the defaults of SPEC §2 and
// §6.1.
//
// Both sides import it: the server (store keeps these records, api serves
// them, health reads and writes verdicts and reports) and every client
// (package client, the CLI, the agent). It has no server code behind it:
// it imports the standard library, the YAML decoder, the label rule
// (package dnsname) and status, a standard-library leaf whose Verdict,
// Lifecycle and Flags are the API's words for them, so a program that
// only calls the API links neither raft nor bolt nor Prometheus.
// cmd/deps_test.go keeps it that way.
//
// Invalid input is a *FieldError, which names the field and the rule it
// breaks and wraps ErrInvalid; the API answers it with 400.
package wire
