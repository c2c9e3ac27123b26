package domain

// Plan is a subscription plan. Limits are per account.
type Plan struct {
	Key             string
	Name            string
	MaxConcurrent   int
	IncludedMinutes int
	// MaxSessionMinutes caps one session's length; 0 means no per-session cap
	// (the minutes left still bound it).
	MaxSessionMinutes int
	// AvatarLimit is the avatars a cycle allows; -1 means unlimited.
	AvatarLimit int
	Paid        bool
}

// Plans is the catalog. Figures the spec leaves open are decided in README "Decisions".
var Plans = map[string]Plan{
	"free":       {Key: "free", Name: "Free", MaxConcurrent: 1, IncludedMinutes: 30, MaxSessionMinutes: 5, AvatarLimit: 0},
	"explorer":   {Key: "explorer", Name: "Explorer", MaxConcurrent: 5, IncludedMinutes: 300, MaxSessionMinutes: 30, AvatarLimit: 20, Paid: true},
	"growth":     {Key: "growth", Name: "Growth", MaxConcurrent: 10, IncludedMinutes: 1000, MaxSessionMinutes: 60, AvatarLimit: 60, Paid: true},
	"pro":        {Key: "pro", Name: "Pro", MaxConcurrent: 20, IncludedMinutes: 3000, MaxSessionMinutes: 180, AvatarLimit: 180, Paid: true},
	"enterprise": {Key: "enterprise", Name: "Enterprise", MaxConcurrent: 50, IncludedMinutes: 10000, MaxSessionMinutes: 0, AvatarLimit: -1, Paid: true},
}

// LookupPlan returns the plan with the given key.
func LookupPlan(key string) (Plan, error) {
	p, ok := Plans[key]
	if !ok {
		return Plan{}, Errorf(Invalid, "Unknown plan %q", key).WithSuggestion("Use one of: free, explorer, growth, pro, enterprise")
	}
	return p, nil
}
