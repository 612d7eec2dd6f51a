"""spectally.reference"""
