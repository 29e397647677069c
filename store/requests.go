package store

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Request states.
const (
	// RequestFinished: the command ran and exited (any exit status).
	RequestFinished = "finished"
	// RequestFailed: the command was stopped or failed; Code says why.
	RequestFailed = "failed"
)

// Request is the record of one Exec that was allowed to run, written when
// it has been answered.
type Request struct {
	ID        string    `json:"id"`
	Principal string    `json:"principal"`
	Rule      string    `json:"rule"`
	Argv      []string  `json:"argv"`
	State     string    `json:"state"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished,omitzero"`
	ExitCode  int       `json:"exit_code"`
	Signal    int       `json:"signal,omitempty"`
	// Code is the refusal code that ended a failed request (e.g.
	// command-timeout, lockout-active).
	Code string `json:"code,omitempty"`
}

// PutRequest creates or replaces a request record.
func (d *DB) PutRequest(r Request) error {
	if r.ID == "" {
		return errors.New("store: request without id")
	}
	return d.put(bucketRequests, []byte(r.ID), r)
}

// Request reads a request record; ErrNotFound when absent.
func (d *DB) Request(id string) (Request, error) {
	var r Request
	err := d.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketRequests), []byte(id), &r)
	})
	if err != nil {
		return Request{}, fmt.Errorf("store: request %s: %w", id, err)
	}
	return r, nil
}
