"""spectally.proofs"""
