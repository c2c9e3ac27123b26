package domain

import (
	"testing"
	"time"
)

func TestExpiration(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		plan Plan
		left int
		want time.Duration
	}{
		{"plan cap", Plans["pro"], 3000, 180 * time.Minute},
		{"fewer minutes left than the cap", Plans["pro"], 7, 7 * time.Minute},
		{"free cap", Plans["free"], 30, 5 * time.Minute},
		{"no per-session cap", Plans["enterprise"], 600, 600 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Expiration(start, tc.plan, tc.left); !got.Equal(start.Add(tc.want)) {
				t.Errorf("got %v, want %v", got, start.Add(tc.want))
			}
		})
	}
}

func TestMinutesUsed(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {time.Second, 1}, {60 * time.Second, 1}, {61 * time.Second, 2}, {90 * time.Minute, 90}} {
		if got := MinutesUsed(tc.d); got != tc.want {
			t.Errorf("MinutesUsed(%v): got %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestCharge(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		minutes, included, bought  int
		wantIncluded, wantPurchase int
		source, status             string
	}{
		{"all from included", 10, 100, 50, 10, 0, SourcePlan, StatusNoCharge},
		{"spills into purchased", 10, 4, 50, 4, 6, SourcePlanAndPurchased, StatusCharged},
		{"all purchased", 10, 0, 50, 0, 10, SourcePurchased, StatusCharged},
		{"overrun beyond both stays on included", 10, 2, 3, 7, 3, SourcePlanAndPurchased, StatusCharged},
		{"negative included left", 5, -3, 10, 0, 5, SourcePurchased, StatusCharged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inc, pur, b := Charge(tc.minutes, tc.included, tc.bought)
			if inc != tc.wantIncluded || pur != tc.wantPurchase || b.MinutesSource != tc.source || b.BillingStatus != tc.status ||
				b.MinutesConsumed != tc.minutes || b.MinutesBilled != pur {
				t.Errorf("got included=%d purchased=%d %+v, want included=%d purchased=%d %s/%s",
					inc, pur, b, tc.wantIncluded, tc.wantPurchase, tc.source, tc.status)
			}
		})
	}
}

func TestCurrentPeriod(t *testing.T) {
	subStart := time.Date(2026, 1, 31, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		user       User
		now        time.Time
		start, end time.Time
	}{
		{"free is the calendar month", User{PlanKey: "free"}, time.Date(2026, 2, 14, 0, 0, 0, 0, time.UTC),
			time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"paid within its period", User{PlanKey: "pro", PeriodStart: subStart, PeriodEnd: subStart.AddDate(0, 1, 0), WillRenew: true},
			time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC), subStart, subStart.AddDate(0, 1, 0)},
		{"paid rolls forward while renewing", User{PlanKey: "pro", PeriodStart: subStart, PeriodEnd: subStart.AddDate(0, 1, 0), WillRenew: true},
			time.Date(2026, 4, 10, 0, 0, 0, 0, time.UTC), subStart.AddDate(0, 2, 0), subStart.AddDate(0, 3, 0)},
		{"lapsed paid plan falls back to the calendar month", User{PlanKey: "pro", PeriodStart: subStart, PeriodEnd: subStart.AddDate(0, 1, 0)},
			time.Date(2026, 4, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.user.CurrentPeriod(tc.now)
			if !p.Start.Equal(tc.start) || !p.End.Equal(tc.end) {
				t.Errorf("got [%v, %v), want [%v, %v)", p.Start, p.End, tc.start, tc.end)
			}
			if tc.now.Before(p.Start) || !tc.now.Before(p.End) {
				t.Errorf("period [%v, %v) does not contain now %v", p.Start, p.End, tc.now)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	now := time.Date(2026, 2, 14, 12, 0, 0, 0, time.UTC)
	u := User{PlanKey: "free", UsagePeriod: "2026-02-01T00:00:00Z", IncludedUsed: 28, PurchasedTotal: 10, PurchasedRemaining: 10, ActiveSessions: 1}
	active := []Session{{ID: "sess_a", Status: StatusStarted, StartedAt: now.Add(-150 * time.Second)}}
	got := Summarize(u, active, now)
	if got.ActiveMinutes != 3 || got.IncludedUsed != 30 || got.IncludedRemaining != 0 ||
		got.PurchasedRemaining != 9 || got.TotalRemaining != 9 || got.ConcurrencyCurrent != 1 || got.ConcurrencyMax != 1 {
		t.Errorf("got %+v", got)
	}
	stale := u
	stale.UsagePeriod = "2026-01-01T00:00:00Z" // last month's counters read as zero
	if got := Summarize(stale, nil, now); got.IncludedUsed != 0 || got.IncludedRemaining != 30 {
		t.Errorf("new period: got used %d remaining %d, want 0 and 30", got.IncludedUsed, got.IncludedRemaining)
	}
}

func TestAllowsVoiceAgent(t *testing.T) {
	u := User{VoiceAgents: []string{VoiceAgentKey(ProviderLiveKit, "concierge")}}
	for _, tc := range []struct {
		name string
		v    VoiceAgent
		want bool
	}{
		{"enabled livekit agent", VoiceAgent{Provider: ProviderLiveKit, AgentID: "concierge"}, true},
		{"same name, other provider", VoiceAgent{Provider: ProviderElevenLabs, AgentID: "concierge"}, false},
		{"other livekit agent", VoiceAgent{Provider: ProviderLiveKit, AgentID: "concierge2"}, false},
		{"local", VoiceAgent{Provider: ProviderLocal, AgentID: "anything"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := u.AllowsVoiceAgent(tc.v) == nil; got != tc.want {
				t.Errorf("allowed: got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStartStage(t *testing.T) {
	claimed := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    Session
		want string
	}{
		{"not started", Session{Status: StatusCreated}, ""},
		{"queued", Session{Status: StatusStarted, WSURI: TryAgain}, StageQueued},
		{"claimed", Session{Status: StatusStarted, WSURI: TryAgain, WorkerID: "w1"}, StageClaimed},
		{"joining", Session{Status: StatusStarted, WSURI: TryAgain, WorkerID: "w1", JoiningAt: claimed}, StageJoining},
		{"serving", Session{Status: StatusStarted, WSURI: "wss://r/ws/s", WorkerID: "w1", JoiningAt: claimed}, ""},
		{"ended", Session{Status: StatusEnded, WSURI: TryAgain}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.StartStage(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
