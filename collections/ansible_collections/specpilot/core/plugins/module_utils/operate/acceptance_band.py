# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The acceptance band rule applied to one reading, with the temperature it was read at.

The rule (bench_verdict.BANDS, one source): draft acceptance below 0.5 - speculative decoding likely
adds latency, turn it off; 0.5 to 0.65 - borderline, measure P99 under load; above 0.65 - likely
helps. Acceptance changes with the sampling temperature (it usually falls as the temperature
rises), so a reading stands for production only at the production temperature
(``specpilot_workload.temperature``). The smoke check reads acceptance from its probes (at the
probes' temperature, 0 by default); the guard reads live traffic (at whatever temperature the
clients send). Both state the band of what they read and say when that was not the production
temperature.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_verdict import BAND_TEXT, band

__all__ = ["RULE", "band_reading"]

RULE = "below 0.5: off; 0.5-0.65: measure P99 under load; above 0.65: likely helps"


def _float(value):
    if value is None or isinstance(value, bool) or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _temperature_note(production, read_at, source):
    if production is None:
        return (
            "the production temperature is not set (specpilot_workload.temperature): whether this reading "
            "stands for production is unknown"
        )
    if read_at is None:
        return (
            "read from %s, at the temperatures its clients send; the production temperature is %g "
            "(specpilot_workload.temperature)" % (source or "live traffic", production)
        )
    if abs(read_at - production) < 1e-9:
        return "read at the production temperature %g" % production
    return (
        "read at temperature %g, not at the production temperature %g: acceptance changes with the "
        "temperature (it usually falls as the temperature rises), so the band at production may differ; "
        "playbooks/benchmark.yml's temperature sweep measures it there" % (read_at, production)
    )


def band_reading(rate, production_temperature=None, read_at=None, source=None):
    """``{acceptance_rate, band, band_text, rule, production_temperature, read_at_temperature,
    at_production, note, line}``.

    read_at: the temperature the reading was taken at (None: unknown, e.g. live traffic);
    at_production: True or False when both temperatures are known, else None; line: one
    sentence for a report."""
    rate = _float(rate)
    production = _float(production_temperature)
    read_at_t = _float(read_at)
    name = band(rate)
    at_production = None
    if production is not None and read_at_t is not None:
        at_production = abs(read_at_t - production) < 1e-9
    note = _temperature_note(production, read_at_t, source)
    if rate is None:
        line = "No acceptance rate was read, so no band (the rule: %s); %s." % (RULE, note)
    else:
        line = "Acceptance %.3f: %s (the rule: %s); %s." % (rate, BAND_TEXT[name], RULE, note)
    return {
        "acceptance_rate": rate,
        "band": name,
        "band_text": BAND_TEXT[name] if name else None,
        "rule": RULE,
        "production_temperature": production,
        "read_at_temperature": read_at_t,
        "at_production": at_production,
        "note": note,
        "line": line,
    }
