"""Seeded synthetic LLM inference traffic: generation, incidents, and sending it."""

from warehouse.synthetic.incidents import KINDS as INCIDENT_KINDS
from warehouse.synthetic.incidents import Incident, parse_incident
from warehouse.synthetic.traffic import BLOCK_ROWS, request_batches, synthetic_requests

__all__ = [
    "BLOCK_ROWS",
    "INCIDENT_KINDS",
    "Incident",
    "parse_incident",
    "request_batches",
    "synthetic_requests",
]
