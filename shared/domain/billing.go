package domain

// Billing is what an ended session consumed.
type Billing struct {
	MinutesConsumed int    `json:"minutes_consumed"`
	MinutesSource   string `json:"minutes_source"`
	BillingStatus   string `json:"billing_status"`
	MinutesBilled   int    `json:"minutes_billed"`
}

// Values of Billing.MinutesSource and Billing.BillingStatus.
const (
	SourcePlan             = "plan_minutes"
	SourcePurchased        = "purchased_minutes"
	SourcePlanAndPurchased = "plan_and_purchased_minutes"
	StatusNoCharge         = "no_charge" // covered by the plan's included minutes
	StatusCharged          = "charged"   // drew on purchased minutes
)

// Charge splits minutes between the included and purchased balances:
// included minutes are consumed first. Minutes beyond both balances (possible
// only when concurrent sessions overrun together) count against included, so
// purchased never goes negative and the overrun stays visible as used.
func Charge(minutes, includedLeft, purchasedLeft int) (fromIncluded, fromPurchased int, b Billing) {
	fromPurchased = min(max(0, purchasedLeft), max(0, minutes-max(0, includedLeft)))
	fromIncluded = minutes - fromPurchased
	b = Billing{MinutesConsumed: minutes, MinutesBilled: fromPurchased}
	switch {
	case fromPurchased == 0:
		b.MinutesSource, b.BillingStatus = SourcePlan, StatusNoCharge
	case fromIncluded == 0:
		b.MinutesSource, b.BillingStatus = SourcePurchased, StatusCharged
	default:
		b.MinutesSource, b.BillingStatus = SourcePlanAndPurchased, StatusCharged
	}
	return fromIncluded, fromPurchased, b
}
