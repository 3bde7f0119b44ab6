package vocab

import (
	"regexp"
)

var runtimeIDRe = regexp.MustCompile(RuntimeIDPattern)

// ValidateRuntimeID checks a runtime ID (a RuntimeImage name) with the grammar the API
// server enforces, for IDs that reach a node or the CLI from untrusted places such as pod
// annotations or launch.json.
func ValidateRuntimeID(id string) error {
	switch {
	case id == "":
		return Errorf(ReasonInvalidRuntimeImageID, "runtime image ID is empty; name a RuntimeImage such as python-3.12")
	case len(id) > MaxRuntimeIDLength:
		return Errorf(ReasonInvalidRuntimeImageID, "runtime image ID %.64q is %d characters; IDs have at most %d", id, len(id), MaxRuntimeIDLength)
	case !runtimeIDRe.MatchString(id):
		return Errorf(ReasonInvalidRuntimeImageID, "runtime image ID %q is not a lowercase DNS subdomain (letters, digits, '-' and '.'; no '@', ':' or '/'); use the RuntimeImage's name, not an image reference", id)
	}
	return nil
}
