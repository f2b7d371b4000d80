"""Offline stand-ins for what the paper config reads from the Hugging Face hub: small local folders in each hub
repo's own layout (`datasets`: the datasets), for a rehearsal of the paper-scale workflow without the hub."""
