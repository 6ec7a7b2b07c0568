package mcptest

// The tenant whose secret the cross-tenant tests try to reach, from other
// tenants' profiles. The tests set VictimVar in the environment of the
// process that resolves secrets, so a spelling that reached it would
// show.
const (
	Victim       = "victim"
	VictimSecret = "gh-token"
	VictimVar    = "JETWAY_MCP_SECRET_VICTIM__GH_TOKEN"
	VictimValue  = "ghp_victim_only_value_7c1e"
)

// CrossTenantSpellings are the ways a profile of another tenant might
// name the victim's secret: the separators the old lookup split on,
// paths, the variable itself, case and separator variants, escapes of
// the tenant encoding, the shared form, and bytes no name may hold. A
// test of a secret lookup runs every one of them; add a spelling here and
// every such test tries it.
var CrossTenantSpellings = []string{
	VictimSecret, "GH_TOKEN", "gh_token", "Gh-Token",
	"victim--gh-token", "VICTIM__GH_TOKEN", "victim__gh_token", "victim__gh-token", "Victim__Gh_Token",
	"VICTIM___GH_TOKEN", "victim-_gh-token", "victim_-gh-token", "_victim__gh_token", "-victim--gh-token",
	"victim--gh-token-", "victim-gh-token", "victim_gh_token", "VICTIM_GH_TOKEN",
	"../victim", "../victim/gh-token", "victim/gh-token", "victim\\gh-token", "victim:gh-token", "victim.gh-token",
	"victim gh-token", "victim\tgh-token", "victim\ngh-token", "victim\x00gh-token", "VICTIM__GH_TOKEN\n",
	"JETWAY_MCP_SECRET_VICTIM__GH_TOKEN", "SECRET_VICTIM__GH_TOKEN", "$JETWAY_MCP_SECRET_VICTIM__GH_TOKEN",
	"${JETWAY_MCP_SECRET_VICTIM__GH_TOKEN}", "%56ICTIM__GH_TOKEN", "victim%2D%2Dgh-token", "VICTIM_5F_5FGH_TOKEN",
	"victim_5F_5Fgh_token", "ｖｉｃｔｉｍ--gh-token", "victim\u2010\u2010gh-token",
	"shared:victim--gh-token", "shared:VICTIM__GH_TOKEN", "shared:../victim", "shared:victim-gh-token",
	"shared:", "shared::victim", "tenant:victim:gh-token", "victim:", ":victim", "*", "victim*", "",
}

// AttackerTenants are tenants whose names resemble the victim's, each of
// which might hope its own variables coincide with the victim's.
var AttackerTenants = []string{
	"acme", "VICTIM", "Victim", "victim_", "victim-", "victim__gh", "victim--gh", "victim_gh", "victim-gh",
	"_victim", "victim_5F", "VICTIM_5F", "v", "victi",
}
