package ghapp

import (
	"errors"
	"regexp"
	"strconv"
)

// MaxID is the largest App or installation id that survives JSON's
// numbers.
const MaxID = 1<<53 - 1

// clientIDPattern is a GitHub App's client id, the other form of iss.
var clientIDPattern = regexp.MustCompile(`^Iv[0-9A-Za-z.]{1,64}$`)

// CheckAppID checks an App's id as the JWT's iss takes it: its number
// (1 to MaxID, digits without a leading zero) or its client id (Iv…).
func CheckAppID(s string) error {
	if clientIDPattern.MatchString(s) {
		return nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 || id > MaxID || strconv.FormatInt(id, 10) != s {
		return errors.New("app_id must be a positive number (the App's id) or its client id (Iv…)")
	}
	return nil
}
