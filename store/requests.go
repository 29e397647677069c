package store

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Request states.
const (
	RequestRunning  = "running"
	RequestFinished = "finished"
	RequestFailed   = "failed"
)

// Request is the record of one Exec that was allowed to run.
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

// MarkInterrupted turns every request still recorded as running into a
// failed one with the given code. The server calls it at start: a request
// running when the previous process died did not finish.
func (d *DB) MarkInterrupted(code string, now time.Time) (int, error) {
	n := 0
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRequests)
		var stale []Request
		err := b.ForEach(func(k, v []byte) error {
			var r Request
			if err := getJSON(b, k, &r); err != nil {
				return err
			}
			if r.State == RequestRunning {
				stale = append(stale, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range stale {
			r.State, r.Code, r.Finished = RequestFailed, code, now
			if err := putJSONTx(b, r.ID, r); err != nil {
				return err
			}
		}
		n = len(stale)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: mark interrupted: %w", err)
	}
	return n, nil
}
