# A Gatekeeper ConstraintTemplate's Rego, kept exactly as Gatekeeper runs it: Rego v0 syntax,
# `violation[{"msg": ..., "details": ...}]` rules, the object under input.review and the
# Constraint's parameters under input.parameters. gpuwarden evaluates it unchanged (the embedded
# engine switches to v0 for such a module); required_labels.yaml plays the Constraint's part.
#
# parameters:
#   message: optional text replacing the generated one
#   labels: [{key: owner, allowedRegex: "^[a-z0-9-]+$"}]   allowedRegex optional

package k8srequiredlabels

message_for(parameters, generated) = text {
	not parameters.message
	text := generated
}

message_for(parameters, _) = text {
	text := parameters.message
}

object_labels[key] = value {
	value := input.review.object.metadata.labels[key]
}

violation[{"msg": msg, "details": {"missing_labels": missing}}] {
	present := {key | object_labels[key]}
	wanted := {key | key := input.parameters.labels[_].key}
	missing := wanted - present
	count(missing) > 0
	msg := message_for(input.parameters, sprintf("missing required labels: %v", [missing]))
}

violation[{"msg": msg}] {
	rule := input.parameters.labels[_]
	value := object_labels[rule.key]
	rule.allowedRegex != ""
	not regex.match(rule.allowedRegex, value)
	msg := message_for(input.parameters, sprintf("label %v=%v does not match %v", [rule.key, value, rule.allowedRegex]))
}
