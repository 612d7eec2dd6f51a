"""spectally.spec"""
