"""The run core: the plan of an audit and its phases, over data, models, audits and the report; nothing of pytest."""
