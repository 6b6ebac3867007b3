package config

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// names.New falls back to names.DefaultSubjectPrefix on an empty subject
// prefix (for the tools and examples that build names without a Config):
// it is ELLIPSIS_SUBJECT_PREFIX's default.
func TestSubjectPrefixDefaultIsNames(t *testing.T) {
	if d := Default().SubjectPrefix; d != names.DefaultSubjectPrefix {
		t.Errorf("ELLIPSIS_SUBJECT_PREFIX's default %q, names.DefaultSubjectPrefix %q", d, names.DefaultSubjectPrefix)
	}
}
