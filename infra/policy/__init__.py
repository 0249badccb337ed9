"""Guardrails: rules over declared resources (`model`), run offline over synthesized graphs
(`engine`, `brew-infra check`) and on real previews through the policy pack (`pack/`)."""
